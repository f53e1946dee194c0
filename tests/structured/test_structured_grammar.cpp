// The grammar compilers and the matcher on exact cases: integer ranges checked against every
// number near their bounds, regex features, whitespace policy, masks over tokens that span
// elements or split a UTF-8 character, stop tokens, rollback, and compile + mask timings.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "structured/schema_error.h"
#include "structured_test_util.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::structured {
namespace {

using testing::bit;
using testing::matches;

TEST(StructuredGrammar, IntegerRangesAreExact) {
  const std::vector<std::pair<int64_t, int64_t>> ranges{{0, 100}, {-50, 50}, {7, 7}, {-1234, -99}, {95, 1005}, {-9, 0}, {1, 19}};
  for (auto [lo, hi] : ranges) {
    Grammar g = compile_json_schema(str_cat(R"({"type":"integer","minimum":)", lo, R"(,"maximum":)", hi, "}"));
    for (int64_t n = lo - 150; n <= hi + 150; ++n)
      EXPECT_EQ(matches(g, std::to_string(n)), n >= lo && n <= hi) << lo << ".." << hi << " " << n;
    EXPECT_FALSE(matches(g, "01"));
    EXPECT_FALSE(matches(g, "-0"));
  }
  Grammar open = compile_json_schema(R"({"type":"integer","minimum":120})");
  for (int64_t n = 0; n < 2000; ++n) EXPECT_EQ(matches(open, std::to_string(n)), n >= 120) << n;
  EXPECT_TRUE(matches(open, "123456789012345"));
}

TEST(StructuredGrammar, NumberBoundsAndForms) {
  Grammar g = compile_json_schema(R"({"type":"number","minimum":-2,"maximum":3})");
  for (const char* ok : {"0", "-2", "3", "2.999", "-1.5", "-0.5", "0.25"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"3.5", "-2.5", "4", "1e3", "01", "3.0001"}) EXPECT_FALSE(matches(g, bad)) << bad;
  Grammar any = compile_json_schema(R"({"type":"number"})");
  for (const char* ok : {"0", "-1.5e+10", "2E-3", "10.25"}) EXPECT_TRUE(matches(any, ok)) << ok;
  for (const char* bad : {"1.", ".5", "+1", "1e", "00"}) EXPECT_FALSE(matches(any, bad)) << bad;
}

TEST(StructuredGrammar, RegexSubset) {
  Grammar g = compile_regex_grammar("[A-Z][a-z]{1,3}(-\\d+)?|x\\.y");
  for (const char* ok : {"Ab", "Abcd", "Ab-12", "x.y"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"A", "Abcde", "Ab-", "xzy", "ab"}) EXPECT_FALSE(matches(g, bad)) << bad;
  Grammar neg = compile_regex_grammar("[^a-c]+");
  EXPECT_TRUE(matches(neg, "xyz\xC3\xA9"));
  EXPECT_FALSE(matches(neg, "xa"));
  // A negated class holding \d keeps to ASCII (Python's \d also covers other scripts' digits).
  Grammar neg_digit = compile_regex_grammar("[^a-c\\d]+");
  EXPECT_TRUE(matches(neg_digit, "xyz"));
  EXPECT_FALSE(matches(neg_digit, "x1"));
  EXPECT_FALSE(matches(neg_digit, "\xC3\xA9"));
  // In a JSON string, '"' and '\' come escaped; an unanchored pattern may have text around it.
  Grammar s = compile_json_schema(R"({"type":"string","pattern":"a\"b"})");
  EXPECT_TRUE(matches(s, R"("a\"b")"));
  EXPECT_TRUE(matches(s, R"("xxa\"byy")"));
  EXPECT_FALSE(matches(s, R"("a"b")"));
}

TEST(StructuredGrammar, BranchesPairEachPrefixWithItsOwnSchema) {
  // A forced harmony call among two functions: each name's header, then its own arguments
  // (local $refs resolved from the whole document).
  const Grammar g = compile_json_schema_branches(
      {"f json<|message|>", "g json<|message|>"},
      R"({"anyOf":[{"type":"object","properties":{"a":{"$ref":"#/$defs/n"}},"required":["a"]},
                   {"enum":[true]}],"$defs":{"n":{"type":"integer","minimum":3}}})",
      "!");
  EXPECT_TRUE(matches(g, "f json<|message|>{\"a\":3}!"));
  EXPECT_TRUE(matches(g, "g json<|message|>true!"));
  EXPECT_FALSE(matches(g, "f json<|message|>true!"));   // f's header with g's arguments
  EXPECT_FALSE(matches(g, "g json<|message|>{\"a\":3}!"));
  EXPECT_FALSE(matches(g, "f json<|message|>{\"a\":2}!"));  // the $ref's minimum holds
  EXPECT_FALSE(matches(g, "h json<|message|>true!"));
  EXPECT_FALSE(matches(g, "f json<|message|>{\"a\":3}"));   // the suffix is required
  EXPECT_THROW(compile_json_schema_branches({"f", "g"}, R"({"anyOf":[{}]})", ""), SchemaError);
  EXPECT_THROW(compile_json_schema_branches({"f"}, R"({"type":"object"})", ""), SchemaError);
}

TEST(StructuredGrammar, ObjectsFollowSchemaOrderAndWhitespacePolicy) {
  const char* schema = R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"boolean"}},"required":["a"]})";
  Grammar compact = compile_json_schema(schema);
  EXPECT_TRUE(matches(compact, R"({"b":1,"a":true})"));
  EXPECT_TRUE(matches(compact, R"({"a":false})"));
  EXPECT_FALSE(matches(compact, R"({"a":true,"b":1})"));
  EXPECT_FALSE(matches(compact, R"({"b":1})"));
  EXPECT_FALSE(matches(compact, R"({"b": 1,"a":true})"));
  EXPECT_FALSE(matches(compact, R"({"a":true,"c":1})"));
  SchemaOptions spaces;
  spaces.whitespace = JsonWhitespace::kSpaces;
  Grammar spaced = compile_json_schema(schema, spaces);
  EXPECT_TRUE(matches(spaced, R"({"b": 1, "a": true})"));
  EXPECT_FALSE(matches(spaced, R"({"b":  1,"a":true})"));
  // Extra keys never spell a declared property.
  Grammar extra = compile_json_schema(R"({"properties":{"ab":{"type":"null"}},"additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(matches(extra, R"({"ab":null,"a":1,"abc":2})"));
  EXPECT_FALSE(matches(extra, R"({"ab":1})"));
  EXPECT_FALSE(matches(extra, R"({"ab":null,"ab":3})"));
}

std::shared_ptr<const CompiledGrammar> compile_with(const TokenVocabulary& v, const std::string& schema) {
  GrammarCompiler c(std::make_shared<const VocabTrie>(v));
  return c.json_schema(schema);
}

TEST(StructuredMatcher, TokensSpanElementsAndSplitCharacters) {
  TokenVocabulary v = testing::synthetic_vocab();
  auto id_of = [&](const std::string& s) {
    return static_cast<int32_t>(std::find(v.token_bytes.begin(), v.token_bytes.end(), s) - v.token_bytes.begin());
  };
  auto g = compile_with(v, R"({"type":"object","properties":{"name":{"enum":["é€"]}},"required":["name"]})");
  Matcher m(g);
  std::vector<uint32_t> mask(m.mask_words());
  m.fill_next_token_mask(mask.data());
  EXPECT_TRUE(bit(mask, id_of("{\"")));
  EXPECT_TRUE(bit(mask, '{'));
  EXPECT_FALSE(bit(mask, id_of("[{")));
  EXPECT_FALSE(bit(mask, v.stop_ids[0]));
  for (const char* t : {"{\"", "name", "\":", "\""}) ASSERT_TRUE(m.accept_token(id_of(t))) << t;
  m.fill_next_token_mask(mask.data());
  EXPECT_TRUE(bit(mask, id_of("\xC3")));        // half of é
  EXPECT_TRUE(bit(mask, id_of("\xC3\xA9")));
  EXPECT_FALSE(bit(mask, id_of("\xE2\x82")));
  ASSERT_TRUE(m.accept_token(id_of("\xC3")));
  ASSERT_FALSE(m.accept_token(id_of("\xC3")));  // refused, nothing changes
  ASSERT_TRUE(m.accept_token(0xA9));
  ASSERT_TRUE(m.accept_token(id_of("\xE2\x82")));
  ASSERT_TRUE(m.accept_token(0xAC));
  EXPECT_EQ(m.forced_bytes(), "\"}");
  ASSERT_TRUE(m.accept_token(id_of("\"}")));
  EXPECT_TRUE(m.is_accepting());
  m.fill_next_token_mask(mask.data());
  EXPECT_TRUE(bit(mask, v.stop_ids[0]));
  EXPECT_EQ(std::count_if(mask.begin(), mask.end(), [](uint32_t w) { return w != 0; }), 1);
  ASSERT_TRUE(m.accept_token(v.stop_ids[0]));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token('x'));
  ASSERT_TRUE(m.rollback(3));  // stop, "}, and the last byte of €
  EXPECT_FALSE(m.is_terminated());
  EXPECT_EQ(m.shortest_completion(), "\xAC\"}");
  EXPECT_FALSE(m.rollback(100));
  // Padding ids have no bytes and are never allowed.
  EXPECT_FALSE(m.accept_token(v.vocab_size() - 2));
}

TEST(StructuredMatcher, SentencePieceVocabularyBytes) {
  const std::string path = std::string(FS_MODELS_DIR) + "/llama2-tokenizer/tokenizer.model";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto tok = Tokenizer::load(path);
  TokenVocabulary v = vocabulary_from_tokenizer(*tok, tok->vocab_size() + 8);
  EXPECT_EQ(v.vocab_size(), tok->vocab_size() + 8);
  const int32_t hello = tok->encode("Hello", false).back();
  EXPECT_EQ(v.token_bytes[hello].substr(v.token_bytes[hello].size() - 5), "Hello");
  EXPECT_TRUE(v.token_bytes[tok->eos_id()].empty());
  EXPECT_TRUE(v.token_bytes[tok->bos_id()].empty());
  // A special token named in spelled_ids is its text (harmony's markers in a forced call).
  const TokenVocabulary spelled = vocabulary_from_tokenizer(*tok, tok->vocab_size(), {}, {tok->bos_id()});
  EXPECT_EQ(spelled.token_bytes[tok->bos_id()], tok->piece(tok->bos_id()));
  EXPECT_FALSE(spelled.token_bytes[tok->bos_id()].empty());
  EXPECT_TRUE(spelled.token_bytes[tok->eos_id()].empty());
  int byte_tokens = 0;
  for (int id = 0; id < tok->vocab_size(); ++id) byte_tokens += tok->piece(id).rfind("<0x", 0) == 0 && v.token_bytes[id].size() == 1;
  EXPECT_EQ(byte_tokens, 256);
}

// Compile + first mask, and later masks, over the Llama 2 vocabulary and a 128k one made from it
// (its tokens plus pairs of them). Printed, not asserted: this machine is shared and slow.
TEST(StructuredMatcher, Timings) {
  const std::string path = std::string(FS_MODELS_DIR) + "/llama2-tokenizer/tokenizer.model";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  auto tok = Tokenizer::load(path);
  TokenVocabulary v32 = vocabulary_from_tokenizer(*tok, tok->vocab_size());
  TokenVocabulary v128 = v32;
  std::mt19937 rng(7);
  while (v128.vocab_size() < 128000) {
    const std::string& a = v32.token_bytes[rng() % v32.vocab_size()];
    const std::string& b = v32.token_bytes[rng() % v32.vocab_size()];
    v128.token_bytes.push_back(a.size() + b.size() < 24 ? a + b : a);
  }
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string","maxLength":20}},"email":{"type":"string","format":"email"}},"required":["name","age","tags"]})";
  for (const TokenVocabulary* v : {&v32, &v128}) {
    auto t0 = std::chrono::steady_clock::now();
    auto trie = std::make_shared<const VocabTrie>(*v);
    auto t1 = std::chrono::steady_clock::now();
    GrammarCompiler compiler(trie);
    auto g = compiler.json_schema(schema);
    Matcher m(g);
    std::vector<uint32_t> mask(m.mask_words());
    m.fill_next_token_mask(mask.data());
    auto t2 = std::chrono::steady_clock::now();
    for (const char* t : {"{", "\"", "name", "\"", ":", "\"", "a"}) {
      std::string s = t;
      auto it = std::find(v->token_bytes.begin(), v->token_bytes.end(), s);
      ASSERT_NE(it, v->token_bytes.end()) << s;
      ASSERT_TRUE(m.accept_token(static_cast<int32_t>(it - v->token_bytes.begin()))) << s;
    }
    auto t3 = std::chrono::steady_clock::now();
    m.fill_next_token_mask(mask.data());  // inside a free string: nearly every token is allowed
    auto t4 = std::chrono::steady_clock::now();
    m.fill_next_token_mask(mask.data());  // the same state: from the mask cache
    auto t5 = std::chrono::steady_clock::now();
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::printf("vocab %d: trie %.1f ms, compile + first mask %.2f ms, string-state mask %.2f ms, cached %.3f ms\n",
                v->vocab_size(), ms(t0, t1), ms(t1, t2), ms(t3, t4), ms(t4, t5));
  }
}

}  // namespace
}  // namespace flashserve::structured
