// tokenizer.json support against Hugging Face `tokenizers` itself: for every tokenizer that
// tools/make_hf_tokenizers.py built in a family's style (tests/tokenizer/data/hf/<family>/: GPT-2,
// Llama 3, Qwen 2, Llama 2, Mistral, Gemma, Phi-3, Falcon, Granite, OLMo 2, SmolLM3 and synthetic
// mixes), every corpus line must encode to exactly the reference ids (with and without special
// tokens, and as transformers' tokenizer(text) where it was recorded) and decode as HF
// decode(skip_special_tokens=True); chat prompts must split as HF encodes them; random id
// sequences must decode the same too. Also: the file lookup, BOS/EOS, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/tokenizer/tokenizer_test_util.h"
#include "tokenizer/special_split.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace flashserve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// EXPECT_THAT_MSG(message, part): `part` occurs in `message`.
#define EXPECT_THAT_MSG(msg, part) \
  EXPECT_NE(std::string(msg).find(part), std::string::npos) << (msg)

const std::string kData = std::string(FS_SOURCE_DIR) + "/tests/tokenizer/data/hf";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

// A family's reference.json, parsed once per run and only read: parsing it (JSON templates
// compiled at -O0 with this file) took most of each test's time under ASan.
const json& reference(const std::string& family) {
  static std::map<std::string, json> parsed;
  auto it = parsed.find(family);
  if (it == parsed.end())
    it = parsed.emplace(family, read_json(kData + "/" + family + "/reference.json")).first;
  return it->second;
}

// Each test loads its own tokenizer (fresh per-thread caches); the reference is shared.
class HfFamily : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { tok_ = Tokenizer::load(kData + "/" + GetParam() + "/tokenizer.json"); }
  std::unique_ptr<Tokenizer> tok_;
  const json& ref_ = reference(GetParam());
};

TEST_P(HfFamily, EncodeMatchesReference) {
  int checked = 0;
  for (const json& line : ref_["lines"]) {
    const std::string text = line["text"];
    SCOPED_TRACE(::testing::PrintToString(text));
    EXPECT_EQ(tok_->encode_parsing_special_tokens(text, false), ids_of(line["ids"]));
    EXPECT_EQ(tok_->encode_parsing_special_tokens(text, true), ids_of(line["ids_special"]));
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

// encode() keeps text that spells a special token as text (tokenizer.h): on lines without such
// text it equals HF; on the others no special id comes out of the text, and where the reference
// recorded HF's split_special_tokens mode (encode_special_tokens=True), it equals that.
TEST_P(HfFamily, EncodeKeepsSpecialSpellingsAsText) {
  std::set<int32_t> special_ids;
  for (const auto& s : tok_->special_tokens()) special_ids.insert(s.id);
  int plain = 0, spelled = 0;
  for (const json& line : ref_["lines"]) {
    const std::string text = line["text"];
    SCOPED_TRACE(::testing::PrintToString(text));
    bool spells = false;
    for (const auto& s : tok_->special_tokens()) spells |= text.find(s.text) != std::string::npos;
    const auto ids = tok_->encode(text, false);
    if (!spells) {
      EXPECT_EQ(ids, ids_of(line["ids"]));
      EXPECT_EQ(tok_->encode(text, true), ids_of(line["ids_special"]));
      ++plain;
      continue;
    }
    ++spelled;
    for (int32_t id : ids) EXPECT_EQ(special_ids.count(id), 0u) << "special id " << id;
    if (line.contains("ids_split_special") && !line["ids_split_special"].is_null()) {
      EXPECT_EQ(ids, ids_of(line["ids_split_special"]));
    }
  }
  EXPECT_GT(plain, 90);
  // Every family but mixed (whose one special is <pad>) has lines that spell its specials.
  if (GetParam() != "mixed") {
    EXPECT_GT(spelled, 0);
  }
}

// A chat prompt in the family's template style, with its messages' byte ranges: the special
// split gives what HF's encode(text, add_special_tokens=False) gives for the whole text (the
// messages spell no special token), also with the messages marked as text.
TEST_P(HfFamily, ChatPromptSplitsAsHfEncodes) {
  if (!ref_.contains("chat")) GTEST_SKIP() << "no chat prompts recorded for " << GetParam();
  for (const json& c : ref_["chat"]) {
    const std::string text = c["text"];
    SCOPED_TRACE(::testing::PrintToString(text));
    ByteRanges literal;
    for (const json& r : c["literal"]) literal.emplace_back(r[0].get<size_t>(), r[1].get<size_t>());
    EXPECT_EQ(encode_with_special_tokens(*tok_, text, literal), ids_of(c["ids"]));
    EXPECT_EQ(encode_with_special_tokens(*tok_, text, {}), ids_of(c["ids"]));
  }
}

TEST_P(HfFamily, MatchesTransformersWhereRecorded) {
  // transformers 5 rebuilds a LlamaTokenizer's pipeline from the class (Metaspace, no legacy
  // Prepend normalizer) instead of reading tokenizer.json's: that family is compared with
  // `tokenizers` only.
  if (!ref_.contains("transformers_class") || ref_["transformers_class"] == "LlamaTokenizer")
    GTEST_SKIP() << "no transformers reference for " << GetParam();
  EXPECT_EQ(tok_->vocab_size(), ref_["transformers_len"].get<int>());
  const json& bos = ref_["transformers_bos_id"];
  const json& eos = ref_["transformers_eos_id"];
  EXPECT_EQ(tok_->bos_id(), bos.is_null() ? -1 : bos.get<int>());
  EXPECT_EQ(tok_->eos_id(), eos.is_null() ? -1 : eos.get<int>());
  for (const json& line : ref_["lines"]) {
    SCOPED_TRACE(::testing::PrintToString(line["text"].get<std::string>()));
    EXPECT_EQ(tok_->encode_parsing_special_tokens(line["text"].get<std::string>(), true),
              ids_of(line["transformers_ids"]));
  }
}

TEST_P(HfFamily, DecodeMatchesReference) {
  EXPECT_EQ(tok_->vocab_size(), ref_["vocab_size"].get<int>());
  for (const json& line : ref_["lines"]) {
    SCOPED_TRACE(::testing::PrintToString(line["text"].get<std::string>()));
    EXPECT_EQ(tok_->decode(ids_of(line["ids_special"])), line["decode"].get<std::string>());
  }
  for (const json& r : ref_["random_decode"]) {
    SCOPED_TRACE(::testing::PrintToString(r["ids"].dump()));
    EXPECT_EQ(tok_->decode(ids_of(r["ids"])), r["text"].get<std::string>());
  }
}

// IncrementalDetokenizer over byte-level and byte-fallback vocabularies, where one character
// spans several tokens: every delta is whole UTF-8 characters, and the deltas after a context of
// k ids are exactly decode(all) minus decode(context) (a suffix of decode(all) at a character
// boundary when the context ends inside a character).
TEST_P(HfFamily, StreamingEqualsDecodeAll) {
  // check(ids, all, k): ids streamed after a context of their first k; all = decode(ids).
  auto check = [&](const std::vector<int32_t>& ids, const std::string& all, size_t k) {
    IncrementalDetokenizer detok(*tok_, std::vector<int32_t>(ids.begin(), ids.begin() + k));
    std::string text;
    for (size_t i = k; i < ids.size(); ++i) {
      const std::string d = detok.push(ids[i]);
      EXPECT_TRUE(is_valid_utf8(d)) << "delta is not valid UTF-8";
      text += d;
    }
    text += detok.flush();
    const std::string context = tok_->decode(std::vector<int32_t>(ids.begin(), ids.begin() + k));
    if (all.compare(0, context.size(), context) == 0) {
      EXPECT_EQ(text, all.substr(context.size())) << "context " << k;
    } else {
      ASSERT_LE(text.size(), all.size());
      EXPECT_EQ(all.substr(all.size() - text.size()), text) << "context " << k;
    }
  };
  for (const json& line : ref_["lines"]) {
    const auto ids = ids_of(line["ids_special"]);
    const std::string all = tok_->decode(ids);
    for (size_t k = 0; k <= ids.size(); k += 1 + ids.size() / 8) check(ids, all, k);
  }
  for (const json& r : ref_["random_decode"]) {
    const auto ids = ids_of(r["ids"]);
    const std::string all = tok_->decode(ids);
    for (size_t k = 0; k <= ids.size(); ++k) check(ids, all, k);
  }
  // A model's padding ids (past the tokenizer's vocabulary) mixed in: they decode to nothing, as
  // in HF, and the stream keeps its guarantees around them.
  std::mt19937 rng(20261125);
  for (const json& r : ref_["random_decode"]) {
    const auto ids = test::with_padding_ids(ids_of(r["ids"]), tok_->vocab_size(), rng);
    SCOPED_TRACE(::testing::PrintToString(ids));
    const std::string all = tok_->decode(ids);
    EXPECT_EQ(all, r["text"].get<std::string>());
    for (size_t k = 0; k <= ids.size(); ++k) check(ids, all, k);
  }
}

TEST_P(HfFamily, SpecialTokensLongestFirstAndDecodeToNothing) {
  const auto specials = tok_->special_tokens();
  for (size_t i = 0; i + 1 < specials.size(); ++i)
    EXPECT_GE(specials[i].text.size(), specials[i + 1].text.size());
  for (const auto& s : specials) {
    EXPECT_EQ(tok_->piece(s.id), s.text);
    EXPECT_EQ(tok_->decode({s.id}), "");
  }
}

// One tokenizer shared by threads (the server's handlers): per-thread caches and match data
// give every thread the single-threaded ids (run under TSan in CI's sanitizer stage).
TEST_P(HfFamily, ConcurrentEncodeAgrees) {
  std::vector<std::vector<int32_t>> expected;
  std::vector<std::string> texts;
  for (const json& line : ref_["lines"]) {
    expected.push_back(ids_of(line["ids"]));
    texts.push_back(line["text"]);
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < expected.size(); ++i)
          if (tok_->encode_parsing_special_tokens(texts[i], false) != expected[i])
            ++mismatches[size_t(t)];
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST_P(HfFamily, InvalidUtf8Throws) {
  EXPECT_THROW(tok_->encode("ab\xC3", false), Error);
  EXPECT_THROW(tok_->encode("\xFF", true), Error);
}

TEST_P(HfFamily, PaddingIdsAreEmptyNegativeIdsThrow) {
  EXPECT_EQ(tok_->decode({tok_->vocab_size()}), "");
  EXPECT_EQ(tok_->piece(tok_->vocab_size() + 5), "");
  EXPECT_THROW(tok_->decode({0, -1}), Error);
  EXPECT_THROW(tok_->piece(-1), Error);
}

// Every family folder with a reference (the generator's families, whichever are committed).
std::vector<std::string> families() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kData))
    if (fs::is_regular_file(e.path() / "reference.json")) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamily, ::testing::ValuesIn(families()),
                         [](const auto& info) { return info.param; });

TEST(HfTokenizerFiles, ReferenceFamiliesAreFound) {
  const auto f = families();
  for (const char* name : {"gpt2", "llama3", "qwen2", "llama2", "mistral", "digits", "mixed"})
    EXPECT_NE(std::find(f.begin(), f.end(), name), f.end()) << name;
}

// A scratch folder under the build tree, emptied per test.
std::string scratch_dir(const std::string& name) {
  const fs::path dir = fs::path(FS_BINARY_DIR) / "test_hf_tokenizer" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The message loading `j` (as a tokenizer.json) throws, or "" when it loads.
std::string load_error(const json& j) {
  const std::string dir = scratch_dir("load_error");
  write_file(dir + "/tokenizer.json", j.dump());
  try {
    Tokenizer::load(dir + "/tokenizer.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfTokenizerFiles, UnsupportedComponentsAreNamed) {
  const json base = read_json(kData + "/gpt2/tokenizer.json");
  EXPECT_EQ(load_error(base), "");
  auto with = [&](const char* key, json value) {
    json j = base;
    j[key] = std::move(value);
    return load_error(j);
  };
  EXPECT_THAT_MSG(with("pre_tokenizer", {{"type", "Whitespace"}}),
                  "tokenizer.json: pre_tokenizer type 'Whitespace' is not supported");
  EXPECT_THAT_MSG(with("normalizer", {{"type", "BertNormalizer"}}),
                  "tokenizer.json: normalizer type 'BertNormalizer' is not supported");
  EXPECT_THAT_MSG(with("decoder", {{"type", "WordPiece"}}),
                  "tokenizer.json: decoder type 'WordPiece' is not supported");
  EXPECT_THAT_MSG(with("post_processor", {{"type", "BertProcessing"}}),
                  "tokenizer.json: post_processor type 'BertProcessing' is not supported");
  json wordpiece = base;
  wordpiece["model"]["type"] = "WordPiece";
  EXPECT_THAT_MSG(load_error(wordpiece), "tokenizer.json: model type 'WordPiece' is not supported");
  json prefix = base;
  prefix["model"]["continuing_subword_prefix"] = "##";
  EXPECT_THAT_MSG(load_error(prefix), "'continuing_subword_prefix' is not supported");
  json bad_regex = base;
  bad_regex["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}},
                                {"behavior", "Isolated"}};
  EXPECT_THAT_MSG(load_error(bad_regex), "pre_tokenizer Split: regex '(unclosed' does not compile");
  json bad_merge = base;
  bad_merge["model"]["merges"].push_back("nosuch token");
  EXPECT_THAT_MSG(load_error(bad_merge), "missing from the vocabulary");
  const std::string dir = scratch_dir("not_json");
  write_file(dir + "/tokenizer.json", "{ not json");
  EXPECT_THROW(Tokenizer::load(dir + "/tokenizer.json"), Error);
}

TEST(HfTokenizerFiles, FindTokenizerFilePrefersJson) {
  const std::string dir = scratch_dir("find");
  try {
    find_tokenizer_file(dir);
    ADD_FAILURE() << "no tokenizer in an empty folder must throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(dir + "/tokenizer.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(dir + "/tokenizer.model"), std::string::npos) << msg;
  }
  fs::copy_file(test::kLlamaTokenizer, dir + "/tokenizer.model");
  EXPECT_EQ(find_tokenizer_file(dir), dir + "/tokenizer.model");
  EXPECT_EQ(Tokenizer::load(dir)->vocab_size(), 32000);
  fs::copy_file(kData + "/llama3/tokenizer.json", dir + "/tokenizer.json");
  EXPECT_EQ(find_tokenizer_file(dir), dir + "/tokenizer.json");
  EXPECT_EQ(Tokenizer::load(dir)->vocab_size(), 1506);
  // Beside a weights file: the same names in its folder.
  write_file(dir + "/model.bin", "");
  EXPECT_EQ(find_tokenizer_file(dir + "/model.bin"), dir + "/tokenizer.json");
  // llama2.c: the single tok*.model beside the .bin or in its folder, as before.
  const std::string stories = test::kStoriesTokenizer.substr(0, test::kStoriesTokenizer.rfind('/'));
  EXPECT_EQ(find_tokenizer_file(stories + "/stories260K.bin"), test::kStoriesTokenizer);
  EXPECT_EQ(find_tokenizer_file(stories), test::kStoriesTokenizer);
}

TEST(HfTokenizerFiles, ConfigDecidesBosAndEos) {
  const std::string dir = scratch_dir("config");
  fs::copy_file(kData + "/llama2/tokenizer.json", dir + "/tokenizer.json");
  auto tok = Tokenizer::load(dir + "/tokenizer.json");  // no config: from the template
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), -1);
  EXPECT_EQ(tok->encode("hi", true).front(), 1);
  write_file(dir + "/tokenizer_config.json",
             R"({"bos_token": {"content": "<s>"}, "eos_token": "</s>", "add_bos_token": false})");
  tok = Tokenizer::load(dir + "/tokenizer.json");
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->encode("hi", true), tok->encode("hi", false)) << "add_bos_token false";
}

TEST(HfTokenizerFiles, AddedTokensAndPieces) {
  auto qwen = Tokenizer::load(kData + "/qwen2/tokenizer.json");
  const auto specials = qwen->special_tokens();
  ASSERT_EQ(specials.size(), 3u);
  EXPECT_EQ(specials[0].text, "<|endoftext|>");  // longest first
  const auto ids = qwen->encode_parsing_special_tokens("<|im_start|>user", false);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(qwen->encode("<|im_start|>user", false).front(), ids[0]) << "typed text stays text";
  EXPECT_EQ(qwen->piece(ids[0]), "<|im_start|>");
  EXPECT_EQ(qwen->decode(ids), "user");  // special tokens decode to nothing
  EXPECT_EQ(qwen->piece(qwen->encode(" the", false)[0]), "\u0120the");
  EXPECT_GE(qwen->max_piece_bytes(), qwen->piece(ids[0]).size());
}

}  // namespace
}  // namespace flashserve
