// IncrementalDetokenizer against Tokenizer::decode: streaming ids one by one gives exactly
// decode(all ids) minus the context's text, every delta is valid UTF-8, and text is not held
// back longer than needed. Run on sample texts, every context split, and random id streams
// heavy in byte-fallback, control and padding ids (past the vocabulary), with both tokenizers.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace flashserve {
namespace {

struct Streamed {
  std::string text;                 // all deltas and the flush, concatenated
  std::vector<std::string> deltas;  // one per push, then the flush
};

Streamed stream(const Tokenizer& t, const std::vector<int32_t>& ids, size_t num_context) {
  IncrementalDetokenizer detok(t, std::vector<int32_t>(ids.begin(), ids.begin() + num_context));
  Streamed out;
  for (size_t i = num_context; i < ids.size(); ++i) out.deltas.push_back(detok.push(ids[i]));
  out.deltas.push_back(detok.flush());
  for (const auto& d : out.deltas) {
    EXPECT_TRUE(is_valid_utf8(d)) << "delta is not valid UTF-8";
    out.text += d;
  }
  return out;
}

// The text a stream with this context split must produce: decode(all) minus decode(context).
// When the context ends inside a UTF-8 sequence, decode(context) is not a prefix of decode(all);
// then the stream must give a suffix of decode(all) that starts at a character boundary.
void expect_stream_matches(const Tokenizer& t, const std::vector<int32_t>& ids, size_t num_context) {
  const std::string all = t.decode(ids);
  const std::string context = t.decode(std::vector<int32_t>(ids.begin(), ids.begin() + num_context));
  const Streamed s = stream(t, ids, num_context);
  if (all.compare(0, context.size(), context) == 0) {
    EXPECT_EQ(s.text, all.substr(context.size())) << "context " << num_context << " of " << ids.size();
  } else {
    ASSERT_LE(s.text.size(), all.size());
    EXPECT_EQ(all.substr(all.size() - s.text.size()), s.text);
  }
}

class Detokenizer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { tok_ = Tokenizer::load(GetParam()); }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(Detokenizer, StreamingEqualsDecodeAll) {
  for (const std::string& text : test::sample_texts()) {
    SCOPED_TRACE(text);
    for (bool bos : {false, true}) {
      const auto ids = tok_->encode(text, bos);
      const Streamed s = stream(*tok_, ids, 0);
      EXPECT_EQ(s.text, tok_->decode(ids));
      EXPECT_EQ(s.deltas.back(), "") << "complete text leaves nothing to flush";
    }
  }
}

TEST_P(Detokenizer, EveryContextSplit) {
  for (const std::string& text : test::sample_texts()) {
    SCOPED_TRACE(text);
    auto ids = tok_->encode(text, true);
    ids.push_back(tok_->eos_id());
    for (size_t k = 0; k <= ids.size(); ++k) expect_stream_matches(*tok_, ids, k);
  }
}

TEST_P(Detokenizer, LeadingSpaceAfterPrompt) {
  const auto ids = tok_->encode("Once upon a time", true);
  const auto prompt = tok_->encode("Once upon", true);
  ASSERT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + prompt.size()), prompt);
  IncrementalDetokenizer detok(*tok_, prompt);
  std::string out;
  for (size_t i = prompt.size(); i < ids.size(); ++i) out += detok.push(ids[i]);
  EXPECT_EQ(out, " a time");
  // Without context the first piece loses its space, as in decode().
  IncrementalDetokenizer fresh(*tok_);
  EXPECT_EQ(fresh.push(ids[1]), "Once");
  EXPECT_EQ(fresh.push(ids[2]), " upon");
}

TEST_P(Detokenizer, HoldsOnlyIncompleteCharacters) {
  // Byte pieces of one emoji: nothing until the last byte, then the whole character.
  IncrementalDetokenizer detok(*tok_, {tok_->bos_id()});
  const int32_t a = tok_->encode("a", false).back();  // "▁a": a space unless it comes first
  EXPECT_EQ(detok.push(a), "a");
  EXPECT_EQ(detok.push(3 + 0xF0), "");
  EXPECT_EQ(detok.push(3 + 0x9F), "");
  EXPECT_EQ(detok.push(3 + 0x98), "");
  EXPECT_EQ(detok.push(3 + 0x80), "\U0001F600");
  // A stream that ends mid-character: flush gives one U+FFFD per byte, like decode().
  EXPECT_EQ(detok.push(3 + 0xE6), "");
  EXPECT_EQ(detok.push(3 + 0x97), "");
  EXPECT_EQ(detok.flush(), "\uFFFD\uFFFD");
  // A stray continuation byte is final once a normal piece follows.
  IncrementalDetokenizer stray(*tok_);
  EXPECT_EQ(stray.push(3 + 0x9F), "");
  EXPECT_EQ(stray.push(a), "\uFFFD a");
  EXPECT_EQ(stray.flush(), "");
}

TEST_P(Detokenizer, NegativeIdThrowsAndLeavesStateIntact) {
  IncrementalDetokenizer detok(*tok_);
  const auto ids = tok_->encode("hello there", false);
  EXPECT_THROW(detok.push(-1), Error);
  EXPECT_THROW(detok.push(INT32_MIN), Error);
  std::string out;
  for (int32_t id : ids) out += detok.push(id);
  EXPECT_EQ(out + detok.flush(), tok_->decode(ids));
}

TEST_P(Detokenizer, RandomIdStreams) {
  std::mt19937 rng(20261121);
  const int vocab = tok_->vocab_size();
  const int32_t space = tok_->encode(" a", false).front();  // "▁" or "▁a"
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    const int len = 1 + int(rng() % 24);
    for (int i = 0; i < len; ++i) {
      const int kind = int(rng() % 10);
      if (kind < 4) ids.push_back(3 + 0x80 + int(rng() % 0x78));      // lead/continuation bytes
      else if (kind < 5) ids.push_back(3 + int(rng() % 0x80));        // ASCII bytes
      else if (kind < 6) ids.push_back(int(rng() % 3));               // <unk>, <s>, </s>
      else if (kind < 7) ids.push_back(space);
      else if (kind < 8) ids.push_back(vocab + int(rng() % 300));    // a model's padding ids
      else ids.push_back(259 + int(rng() % uint32_t(vocab - 259)));  // ordinary pieces
    }
    SCOPED_TRACE(::testing::PrintToString(ids));
    expect_stream_matches(*tok_, ids, 0);
    expect_stream_matches(*tok_, ids, size_t(rng() % (ids.size() + 1)));
  }
}

// Ids past the tokenizer's vocabulary (a model's padding rows) push as nothing: mixed into real
// encodings (also inside byte-fallback runs and the context), the stream still gives exactly
// decode(all), which is the text without them.
TEST_P(Detokenizer, PaddingIdsPushNothing) {
  std::mt19937 rng(20261125);
  IncrementalDetokenizer alone(*tok_);
  EXPECT_EQ(alone.push(tok_->vocab_size()), "");
  EXPECT_EQ(alone.flush(), "");
  for (const std::string& text : test::sample_texts()) {
    const auto ids = tok_->encode(text, true);
    for (int trial = 0; trial < 5; ++trial) {
      const auto padded = test::with_padding_ids(ids, tok_->vocab_size(), rng);
      SCOPED_TRACE(::testing::PrintToString(padded));
      EXPECT_EQ(tok_->decode(padded), tok_->decode(ids));
      EXPECT_EQ(stream(*tok_, padded, 0).text, tok_->decode(ids));
      expect_stream_matches(*tok_, padded, size_t(rng() % (padded.size() + 1)));
    }
  }
}

TEST_P(Detokenizer, EncodedEmojiAndCjkStreams) {
  // Real encodings of texts rich in byte fallback, with every valid UTF-8 text of 1-3 random
  // code points from a mixed pool.
  const std::vector<std::string> pool = {"a", " ", "\u00e9", "\u65e5", "\U0001F600", "\U0001F1EF",
                                         "\n", "  ", "\u20ac", "Z", "\u0416", "\U0001F44D\U0001F3FD"};
  for (const auto& x : pool)
    for (const auto& y : pool)
      for (const auto& z : {std::string(), std::string(" b"), std::string("\u4e2d")}) {
        const std::string text = x + y + z;
        const auto ids = tok_->encode(text, true);
        EXPECT_EQ(stream(*tok_, ids, 0).text, tok_->decode(ids)) << text;
        expect_stream_matches(*tok_, ids, ids.size() / 2);
      }
}

INSTANTIATE_TEST_SUITE_P(BothTokenizers, Detokenizer,
                         ::testing::Values(test::kStoriesTokenizer, test::kLlamaTokenizer),
                         [](const auto& info) { return info.index == 0 ? "stories" : "llama2"; });

}  // namespace
}  // namespace flashserve
