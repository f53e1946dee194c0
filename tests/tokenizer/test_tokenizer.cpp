// SentencePiece Tokenizer with the stories260K (512 pieces) and Llama 2 (32,000 pieces) models:
// special ids, known encodings, round trips, byte-fallback pieces, and clear errors for invalid
// UTF-8, out-of-range ids and bad model files.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {
namespace {

using test::kLlamaTokenizer;
using test::kStoriesTokenizer;
using test::with_padding_ids;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The stories tokenizer normalises whitespace (drops leading/trailing, collapses runs of
// spaces); Llama 2's keeps it. Only spaces are touched: tabs and newlines stay.
std::string collapse_spaces(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ' || (!out.empty() && out.back() != ' ')) out += c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

TEST(Tokenizer, SpecialIdsAndSizes) {
  auto stories = Tokenizer::load(kStoriesTokenizer);
  auto llama = Tokenizer::load(kLlamaTokenizer);
  EXPECT_EQ(stories->vocab_size(), 512);
  EXPECT_EQ(llama->vocab_size(), 32000);
  for (const auto* t : {stories.get(), llama.get()}) {
    EXPECT_EQ(t->bos_id(), 1);
    EXPECT_EQ(t->eos_id(), 2);
    EXPECT_EQ(t->piece(1), "<s>");
    EXPECT_EQ(t->piece(2), "</s>");
    EXPECT_EQ(t->decode({1, 2, 1}), "");
    EXPECT_EQ(t->encode("", false), std::vector<int32_t>{});
    EXPECT_EQ(t->encode("", true), std::vector<int32_t>{1});
  }
}

TEST(Tokenizer, KnownEncodings) {
  auto stories = Tokenizer::load(kStoriesTokenizer);
  auto llama = Tokenizer::load(kLlamaTokenizer);
  EXPECT_EQ(stories->encode("Once upon", true), (std::vector<int32_t>{1, 403, 407}));
  EXPECT_EQ(stories->piece(403), "\u2581Once");
  EXPECT_EQ(llama->encode("Once upon", true), (std::vector<int32_t>{1, 9038, 2501}));
  EXPECT_EQ(llama->encode("Once upon", false), (std::vector<int32_t>{9038, 2501}));
  // A leading space survives in Llama 2 as an extra "▁" piece.
  EXPECT_EQ(llama->encode(" Hello", false), (std::vector<int32_t>{29871, 15043}));
  EXPECT_EQ(llama->decode({29871, 15043}), " Hello");
  EXPECT_EQ(llama->decode({15043}), "Hello");  // the first piece's "▁" is dropped
}

TEST(Tokenizer, RoundTrips) {
  auto stories = Tokenizer::load(kStoriesTokenizer);
  auto llama = Tokenizer::load(kLlamaTokenizer);
  for (const std::string& text : test::sample_texts()) {
    SCOPED_TRACE(text);
    for (bool bos : {false, true}) {
      const auto ids = llama->encode(text, bos);
      EXPECT_EQ(llama->decode(ids), text);
      EXPECT_EQ(stories->decode(stories->encode(text, bos)), collapse_spaces(text));
      if (bos) {
        ASSERT_FALSE(ids.empty());
        EXPECT_EQ(ids[0], 1);
        EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), llama->encode(text, false));
      }
    }
  }
}

// Text that spells the special pieces stays text: a prompt cannot inject an EOS (which would end
// generation) or a second BOS.
TEST(Tokenizer, TextSpellingSpecialPiecesIsNotASpecialId) {
  for (const auto& path : {kStoriesTokenizer, kLlamaTokenizer}) {
    SCOPED_TRACE(path);
    auto t = Tokenizer::load(path);
    const std::string text = "the end </s> and <s> more";
    const std::vector<int32_t> ids = t->encode(text, /*add_bos=*/true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), t->bos_id());
    EXPECT_EQ(std::count(ids.begin(), ids.end(), t->bos_id()), 1);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), t->eos_id()), 0);
    EXPECT_EQ(t->decode(ids), text);
  }
}

TEST(Tokenizer, ByteFallbackPieces) {
  for (const auto& path : {kStoriesTokenizer, kLlamaTokenizer}) {
    SCOPED_TRACE(path);
    auto t = Tokenizer::load(path);
    // U+1F600 is not a piece in either vocabulary: it falls back to its four UTF-8 bytes.
    std::vector<std::string> pieces;
    for (int32_t id : t->encode("\U0001F600", false)) pieces.push_back(t->piece(id));
    ASSERT_GE(pieces.size(), 4u);
    EXPECT_EQ(std::vector<std::string>(pieces.end() - 4, pieces.end()),
              (std::vector<std::string>{"<0xF0>", "<0x9F>", "<0x98>", "<0x80>"}));
    // Byte pieces are ids 3..258 (<0x00>..<0xFF>) in both models.
    EXPECT_EQ(t->piece(3 + 0xF0), "<0xF0>");
    const int32_t f0 = 3 + 0xF0, x9f = 3 + 0x9F, x98 = 3 + 0x98, x80 = 3 + 0x80;
    EXPECT_EQ(t->decode({f0, x9f, x98, x80}), "\U0001F600");
    // Incomplete or stray bytes decode to one U+FFFD per byte (IncrementalDetokenizer::flush
    // relies on this).
    EXPECT_EQ(t->decode({f0}), "\uFFFD");
    EXPECT_EQ(t->decode({f0, x9f, x98}), "\uFFFD\uFFFD\uFFFD");
    EXPECT_EQ(t->decode({x9f, 3 + 'A'}), "\uFFFDA");
    EXPECT_EQ(t->decode({3 + 0x0A}), "\n");
  }
}

TEST(Tokenizer, InvalidUtf8IsAClearError) {
  for (const std::string& model : {kLlamaTokenizer, kStoriesTokenizer}) {
    SCOPED_TRACE(model);
    auto t = Tokenizer::load(model);
    const std::vector<std::pair<std::string, int>> bad = {
        {"\xff", 0},                   // never valid
        {"abc\xC3", 3},                // cut-off sequence at the end
        {"ok \xC0\xAF", 3},            // overlong "/"
        {"\xED\xA0\x80", 0},           // UTF-16 surrogate
        {"ab\xF4\x90\x80\x80", 2},     // above U+10FFFF
        {"\xE2\x82 x", 0},             // truncated in the middle
    };
    for (const auto& [text, offset] : bad) {
      const std::string msg = error_of([&, &text = text] { t->encode(text, true); });
      EXPECT_NE(msg.find("invalid UTF-8 in text to encode at byte " + std::to_string(offset)),
                std::string::npos)
          << msg;
    }
    EXPECT_NO_THROW(t->encode("\xF4\x8F\xBF\xBF \xEF\xBF\xBD", false));  // U+10FFFF, U+FFFD are fine
  }
}

// Ids past the vocabulary (a model's padding rows) decode to nothing, as in transformers;
// negative ids are an error.
TEST(Tokenizer, PaddingIdsDecodeToNothingNegativeIdsThrow) {
  auto t = Tokenizer::load(kStoriesTokenizer);
  const auto ids = t->encode("Once upon a time \u00e9\U0001F600", true);
  EXPECT_EQ(t->decode({5, 512}), t->decode({5}));
  EXPECT_EQ(t->decode({512, 100000, 1 << 30}), "");
  EXPECT_EQ(t->piece(512), "");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial)
    EXPECT_EQ(t->decode(with_padding_ids(ids, t->vocab_size(), rng)), t->decode(ids));
  EXPECT_NE(error_of([&] { t->decode({5, -1}); }).find("token id -1 is negative"), std::string::npos);
  EXPECT_NE(error_of([&] { t->piece(-1); }).find("token id -1 is negative"), std::string::npos);
}

TEST(Tokenizer, BadFiles) {
  const std::string missing = std::string(FS_MODELS_DIR) + "/nope.model";
  EXPECT_NE(error_of([&] { Tokenizer::load(missing); }).find(missing + ": tokenizer model file does not exist"),
            std::string::npos);
  const std::string not_a_model = std::string(FS_MODELS_DIR) + "/README.md";
  EXPECT_NE(error_of([&] { Tokenizer::load(not_a_model); }).find(not_a_model + ": not a SentencePiece model"),
            std::string::npos);
}

}  // namespace
}  // namespace flashserve
