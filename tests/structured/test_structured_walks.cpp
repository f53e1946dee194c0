// Random walks through the token masks, for every schema in tests/structured/schemas and a few
// regexes and choice lists, over a synthetic vocabulary (tokens spanning several JSON elements,
// partial UTF-8) and the stories260K and Llama 2 SentencePiece vocabularies. Every walk must end
// with the stop token within a bound, and validate_walks.py (python3-jsonschema, Python's re)
// must accept every output. Also prints compile + first-mask times.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "structured_test_util.h"
#include "tests/common/temp_dir.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::structured {
namespace {

namespace fs = std::filesystem;
using testing::synthetic_vocab;

struct NamedTrie {
  std::string name;
  std::shared_ptr<const VocabTrie> trie;
  int walks;
};

std::vector<NamedTrie> vocabularies() {
  std::vector<NamedTrie> out{{"synthetic", std::make_shared<const VocabTrie>(synthetic_vocab()), 12}};
  for (const char* rel : {"/stories260K/tok512.model", "/llama2-tokenizer/tokenizer.model"}) {
    const std::string path = std::string(FS_MODELS_DIR) + rel;
    if (!fs::exists(path)) continue;
    auto tok = Tokenizer::load(path);
    out.push_back({rel, std::make_shared<const VocabTrie>(vocabulary_from_tokenizer(*tok, tok->vocab_size())), 6});
  }
  return out;
}

std::string to_hex(const std::string& s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) out += {kHex[c >> 4], kHex[c & 15]};
  return out;
}

bool structural(const std::string& b) {
  constexpr std::string_view kStructural = "{}[]\",:0123456789";
  return std::all_of(b.begin(), b.end(), [&](char c) { return kStructural.find(c) != std::string_view::npos; });
}

// The ids below n whose mask bits are set, in increasing order (a word at a time: most of a
// large vocabulary is masked off).
std::vector<int32_t> set_bits(const std::vector<uint32_t>& mask, int32_t n) {
  std::vector<int32_t> ids;
  for (size_t w = 0; w < mask.size(); ++w)
    for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
      const int32_t id = int32_t(w * 32) + std::countr_zero(bits);
      if (id < n) ids.push_back(id);
    }
  return ids;
}

// Picks random allowed tokens until the stop token (half the time among short structural ones).
// Past kBudget tokens it follows the matcher's shortest completion (the longest allowed token that
// starts it), so the walk ends; the text is the tokens' bytes.
std::string walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng, bool& stopped) {
  constexpr int kBudget = 60, kCap = 2000;
  const TokenVocabulary& v = g->trie().vocabulary();
  Matcher m(g);
  std::vector<uint32_t> mask(m.mask_words());
  std::string text;
  stopped = false;
  for (int step = 0; step < kCap; ++step) {
    m.fill_next_token_mask(mask.data());
    std::vector<int32_t> allowed, preferred;
    const std::string finish = step >= kBudget ? m.shortest_completion() : std::string();
    bool stop_ok = false;
    for (int32_t id : set_bits(mask, v.vocab_size())) {
      if (std::find(v.stop_ids.begin(), v.stop_ids.end(), id) != v.stop_ids.end()) { stop_ok = true; continue; }
      allowed.push_back(id);
      const std::string& b = v.token_bytes[id];
      if (step < kBudget && structural(b)) preferred.push_back(id);
      if (step >= kBudget && finish.compare(0, b.size(), b) == 0 &&
          (preferred.empty() || b.size() > v.token_bytes[preferred[0]].size()))
        preferred = {id};
    }
    EXPECT_EQ(stop_ok, m.is_accepting());
    if (stop_ok && (allowed.empty() || step >= kBudget || rng() % 6 == 0)) {
      EXPECT_TRUE(m.accept_token(v.stop_ids[0]));
      stopped = true;
      return text;
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "dead end after " << text;
      return text;
    }
    if (step >= kBudget) EXPECT_FALSE(preferred.empty()) << "no token starts the completion " << finish;
    const bool prefer = !preferred.empty() && (step >= kBudget || rng() % 2 == 0);
    const std::vector<int32_t>& pool = prefer ? preferred : allowed;
    const int32_t id = pool[rng() % pool.size()];
    EXPECT_TRUE(m.accept_token(id));
    text += v.token_bytes[id];
  }
  return text;
}

void write_entry(std::ofstream& out, const std::string& kind, const nlohmann::json& spec, const std::string& text) {
  out << nlohmann::json{{"kind", kind}, {"spec", spec}, {"hex", to_hex(text)}}.dump() << "\n";
}

TEST(StructuredWalks, EveryWalkEndsAndValidates) {
  const std::string dir = test::fresh_dir("walks");
  const std::string walks_path = dir + "/walks.jsonl";
  std::ofstream out(walks_path);
  std::vector<std::string> schemas;
  for (const auto& e : fs::directory_iterator(std::string(FS_SOURCE_DIR) + "/tests/structured/schemas"))
    schemas.push_back(e.path().string());
  std::sort(schemas.begin(), schemas.end());
  ASSERT_GE(schemas.size(), 20u);
  const std::vector<std::string> regexes{"[a-z]{1,8}@(example|test)\\.(com|org)", "-?(0|[1-9][0-9]{0,3})(\\.[0-9]{1,2})?",
                                         "(yes|no|maybe)!?", "[^\\n]{0,6}\\n"};
  const std::vector<std::vector<std::string>> choices{{"positive", "negative", "neutral"}, {"a", "ab", "abc", "é€"}};
  std::mt19937 rng(1234);
  for (const NamedTrie& vocab : vocabularies()) {
    GrammarCompiler compiler(vocab.trie);
    for (const std::string& path : schemas) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      auto g = compiler.json_schema(text.str());
      for (int k = 0; k < vocab.walks; ++k) {
        bool stopped = false;
        std::string s = walk(g, rng, stopped);
        EXPECT_TRUE(stopped) << vocab.name << " " << path << ": no stop within the bound: " << s.substr(0, 200);
        write_entry(out, "schema", path, s);
      }
    }
    for (const std::string& re : regexes)
      for (int k = 0; k < vocab.walks; ++k) {
        bool stopped = false;
        std::string s = walk(compiler.regex(re), rng, stopped);
        EXPECT_TRUE(stopped) << vocab.name << " regex " << re;
        write_entry(out, "regex", re, s);
      }
    for (const auto& list : choices)
      for (int k = 0; k < vocab.walks; ++k) {
        bool stopped = false;
        std::string s = walk(compiler.choice(list), rng, stopped);
        EXPECT_TRUE(stopped) << vocab.name << " choice";
        write_entry(out, "choice", list, s);
      }
  }
  out.close();
  const std::string cmd = "python3 " + std::string(FS_SOURCE_DIR) + "/tests/structured/validate_walks.py " +
                          walks_path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string report;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) report.append(buf, n);
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << report;
  std::printf("%s", report.c_str());
}

}  // namespace
}  // namespace flashserve::structured
