// tokenizer.json features of the Gemma / Phi-3 / Falcon families, on tiny hand-written files whose
// ids follow by hand from HF `tokenizers`' documented semantics: added tokens' lstrip, rstrip,
// single_word and normalized; the Punctuation pre-tokenizer with each behavior; and a chat
// prompt's special split (encode_with_special_tokens), which for tokenizer.json is HF's encode of
// the whole text with message text kept as text. Vocabularies: ids 3..258 are the byte pieces
// <0xNN> (byte fallback), so any character without a piece of its own is 3 + its bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/special_split.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

int32_t byte_id(unsigned char c) { return 3 + c; }

Ids bytes(const std::string& s) {
  Ids ids;
  for (unsigned char c : s) ids.push_back(byte_id(c));
  return ids;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

json added(int id, const std::string& content, bool special, bool lstrip, bool rstrip,
           bool single_word, bool normalized) {
  return {{"id", id},           {"content", content},       {"special", special},
          {"lstrip", lstrip},   {"rstrip", rstrip},         {"single_word", single_word},
          {"normalized", normalized}};
}

// A BPE tokenizer.json: <unk> <s> </s>, the 256 byte pieces, then `pieces` from id 259.
json bpe_file(const std::vector<std::string>& pieces,
              const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char name[8];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = 259 + int(i);
  json m = json::array();
  for (const auto& [a, b] : merges) m.push_back({a, b});
  json j = {{"version", "1.0"},
            {"model",
             {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"unk_token", "<unk>"},
              {"byte_fallback", true}, {"fuse_unk", true}}},
            {"normalizer", nullptr},
            {"pre_tokenizer", nullptr},
            {"decoder", {{"type", "ByteFallback"}}},
            {"added_tokens",
             {added(0, "<unk>", true, false, false, false, false),
              added(1, "<s>", true, false, false, false, false),
              added(2, "</s>", true, false, false, false, false)}}};
  return j;
}

std::unique_ptr<Tokenizer> load(const std::string& name, const json& j) {
  const auto dir = std::filesystem::path(FS_BINARY_DIR) / "test_hf_family_style" / name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  return Tokenizer::load((dir / "tokenizer.json").string());
}

// "▁Hello" and "Hello" from merges; Phi-3 and Gemma style share it.
const std::vector<std::string> kHelloPieces = {"\u2581", "H", "e", "l", "o", "!",
                                               "ll", "\u2581H", "ell", "ello", "\u2581Hello",
                                               "Hello"};
const std::vector<std::pair<std::string, std::string>> kHelloMerges = {
    {"l", "l"}, {"\u2581", "H"}, {"e", "ll"}, {"ell", "o"}, {"\u2581H", "ello"}, {"H", "ello"}};
constexpr int32_t kBar = 259, kLowE = 261, kLowL = 262, kLowO = 263, kBang = 264,
                  kBarHello = 269, kHello = 270;

// Phi-3: Llama-2 style (Prepend "▁" + Replace " " -> "▁", no pre-tokenizer), and its chat
// tokens carry rstrip, which eats the newline the template writes after each of them.
std::unique_ptr<Tokenizer> phi3() {
  json j = bpe_file(kHelloPieces, kHelloMerges);
  const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace}}};
  j["added_tokens"].push_back(added(271, "<|assistant|>", true, false, true, false, false));
  j["added_tokens"].push_back(added(272, "<|end|>", true, false, true, false, false));
  j["added_tokens"].push_back(added(273, "<|user|>", true, false, true, false, false));
  return load("phi3", j);
}

TEST(HfFamilyStyle, Phi3RstripEatsTheTemplatesNewlineAndTheWordKeepsItsSpace) {
  auto tok = phi3();
  const std::string text = "<|user|>\nHello!<|end|>\n<|assistant|>\n";
  // <|user|> takes "\n"; "Hello!" is normalized on its own to "▁Hello!"; <|end|> takes "\n".
  const Ids want = {273, kBarHello, kBang, 272, 271};
  EXPECT_EQ(encode_with_special_tokens(*tok, text, {}), want);
  EXPECT_EQ(encode_with_special_tokens(*tok, text, {{9, 15}}), want);  // "Hello!" is the message
  EXPECT_EQ(tok->encode_parsing_special_tokens(text, false), want);
  // Cutting at the specials and encoding each stretch alone (the SentencePiece way) would keep
  // the newlines, each with a "▁" before it, and lose "Hello"'s "▁".
  const Ids cut = {273, kBar, byte_id('\n'), kHello, kBang, 272, kBar, byte_id('\n'), 271, kBar,
                   byte_id('\n')};
  EXPECT_EQ(tok->Tokenizer::encode_chat_prompt(text, {}), cut);
}

TEST(HfFamilyStyle, Phi3MessageSpellingATurnEndStaysText) {
  auto tok = phi3();
  const std::string text = "<|user|>\nHello!<|end|><|end|>\n<|assistant|>\n";
  const Ids ids = encode_with_special_tokens(*tok, text, {{9, 22}});
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 272), 1);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 273);
  EXPECT_EQ(Ids(ids.end() - 2, ids.end()), (Ids{272, 271}));
  EXPECT_EQ(Ids(ids.begin() + 1, ids.begin() + 3), (Ids{kBarHello, kBang}));
}

// Gemma: Replace " " -> "▁" only (no "▁" in front of a text), byte fallback, no pre-tokenizer.
TEST(HfFamilyStyle, GemmaChatTurn) {
  json j = bpe_file(kHelloPieces, kHelloMerges);
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
  j["added_tokens"].push_back(added(280, "<start_of_turn>", true, false, false, false, false));
  j["added_tokens"].push_back(added(281, "<end_of_turn>", true, false, false, false, false));
  auto tok = load("gemma", j);
  const std::string text = "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n";
  const Ids want = cat({{280, byte_id('u'), byte_id('s'), kLowE, byte_id('r'), byte_id('\n'),
                         kHello, 281, byte_id('\n'), 280, byte_id('m'), kLowO, byte_id('d'), kLowE,
                         kLowL, byte_id('\n')}});
  EXPECT_EQ(encode_with_special_tokens(*tok, text, {{20, 25}}), want);
  EXPECT_EQ(tok->encode(" Hello", false), (Ids{kBarHello}));
}

// Metaspace prepend_scheme "first": only the text's real start gets a "▁", not the stretch after
// a special token (HF checks the stretch's offset in the original text).
TEST(HfFamilyStyle, MetaspaceFirstCountsOnlyTheTextsStart) {
  json j = bpe_file(kHelloPieces, kHelloMerges);
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"},
                        {"prepend_scheme", "first"}, {"split", false}};
  j["added_tokens"].push_back(added(290, "[INST]", true, false, false, false, false));
  auto tok = load("metaspace_first", j);
  EXPECT_EQ(encode_with_special_tokens(*tok, "<s>[INST]Hello", {{9, 14}}), (Ids{1, 290, kHello}));
  EXPECT_EQ(encode_with_special_tokens(*tok, "[INST] Hello", {{7, 12}}), (Ids{290, kBarHello}));
  EXPECT_EQ(encode_with_special_tokens(*tok, "Hello", {}), (Ids{kBarHello}));
}

// Byte pieces only, normalizer Replace "q" -> "Q", and added tokens with every flag.
std::unique_ptr<Tokenizer> flags() {
  json j = bpe_file({}, {});
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", "q"}}}, {"content", "Q"}};
  j["added_tokens"].push_back(added(300, "<L>", true, true, false, false, false));
  j["added_tokens"].push_back(added(301, "<R>", true, false, true, false, false));
  j["added_tokens"].push_back(added(302, "<B>", true, true, true, false, false));
  j["added_tokens"].push_back(added(303, "sw", false, false, false, true, false));
  j["added_tokens"].push_back(added(304, "qz", false, false, false, false, true));
  j["added_tokens"].push_back(added(305, "qy", false, false, false, false, false));
  j["added_tokens"].push_back(added(306, "<N>", true, false, false, false, true));
  return load("flags", j);
}

TEST(HfFamilyStyle, LstripAndRstripEatWhitespace) {
  auto tok = flags();
  EXPECT_EQ(tok->encode_parsing_special_tokens("a  <L>b", false),
            cat({bytes("a"), {300}, bytes("b")}));
  EXPECT_EQ(tok->encode_parsing_special_tokens("a<R>  \n b", false),
            cat({bytes("a"), {301}, bytes("b")}));
  EXPECT_EQ(tok->encode_parsing_special_tokens("x \t<B>\u3000y", false),  // U+3000 is whitespace
            cat({bytes("x"), {302}, bytes("y")}));
  // Whitespace another token's rstrip took is not taken twice; nothing is left between them.
  EXPECT_EQ(tok->encode_parsing_special_tokens("<R> <L>", false), (Ids{301, 300}));
  // encode() keeps special spellings as text, whitespace included.
  EXPECT_EQ(tok->encode("a <L>", false), bytes("a <L>"));
}

TEST(HfFamilyStyle, SingleWordMatchesOnlyWholeWords) {
  auto tok = flags();
  EXPECT_EQ(tok->encode("sw sw, swim _sw 1sw", false),
            cat({{303}, bytes(" "), {303}, bytes(", swim _sw 1sw")}));
  EXPECT_EQ(tok->encode("\u00e9sw", false), bytes("\u00e9sw"));  // a letter before it
  EXPECT_EQ(tok->encode("\u2014sw\u2014", false), cat({bytes("\u2014"), {303}, bytes("\u2014")}));
}

TEST(HfFamilyStyle, NormalizedTokensMatchNormalizedText) {
  auto tok = flags();
  // "qz" is normalized (its pattern becomes "Qz"): it matches "qz" and "Qz" alike.
  EXPECT_EQ(tok->encode("aqzb", false), cat({bytes("a"), {304}, bytes("b")}));
  EXPECT_EQ(tok->encode("aQzb", false), cat({bytes("a"), {304}, bytes("b")}));
  // "qy" is not: it matches the raw text only, before "q" becomes "Q".
  EXPECT_EQ(tok->encode("aqyb", false), cat({bytes("a"), {305}, bytes("b")}));
  EXPECT_EQ(tok->encode("aQyb", false), bytes("aQyb"));
  EXPECT_EQ(tok->encode("q", false), bytes("Q"));
}

TEST(HfFamilyStyle, ChatSplitHonoursFlagsAndKeepsMessagesText) {
  auto tok = flags();
  // Template "<R>\n{message} <L>": rstrip and lstrip take the template's whitespace.
  EXPECT_EQ(encode_with_special_tokens(*tok, "<R>\nhi <L>", {{4, 6}}),
            cat({{301}, bytes("hi"), {300}}));
  // lstrip also takes a message's trailing whitespace, as HF does on the whole text.
  EXPECT_EQ(encode_with_special_tokens(*tok, "<R>\nhi  <L>", {{4, 8}}),
            cat({{301}, bytes("hi"), {300}}));
  // A message spelling <R>: text; the template's <L> after it is still the token.
  EXPECT_EQ(encode_with_special_tokens(*tok, "<R>\n<R> x<L>", {{4, 9}}),
            cat({{301}, bytes("<R> x"), {300}}));
  // An occurrence straddling a message's edge is nobody's: text.
  EXPECT_EQ(encode_with_special_tokens(*tok, "<R>x", {{0, 2}}), bytes("<R>x"));
  // A special token matched after normalization counts only in a stretch without message text.
  EXPECT_EQ(encode_with_special_tokens(*tok, "<N>ab", {}), cat({{306}, bytes("ab")}));
  EXPECT_EQ(encode_with_special_tokens(*tok, "<N>ab", {{3, 5}}), bytes("<N>ab"));
  EXPECT_EQ(encode_with_special_tokens(*tok, "<R><N>", {{0, 0}}), (Ids{301, 306}));
  // Non-special added tokens are matched in messages too (they are not control tokens).
  EXPECT_EQ(encode_with_special_tokens(*tok, "<L>sw", {{3, 5}}), (Ids{300, 303}));
}

// Falcon's Punctuation pre-tokenizer. Merges "a!", "!?", "!b", "a$", "a¿", "a€" show where the
// pieces were cut: a merge happens only inside a piece.
std::unique_ptr<Tokenizer> punctuation(const json& behavior) {
  json j = bpe_file({"a", "b", "!", "?", "a!", "!?", "!b", "$", "a$", "\u00bf", "a\u00bf",
                     "\u20ac", "a\u20ac"},
                    {{"a", "!"}, {"!", "?"}, {"!", "b"}, {"a", "$"}, {"a", "\u00bf"},
                     {"a", "\u20ac"}});
  json p = {{"type", "Punctuation"}};
  if (!behavior.is_null()) p["behavior"] = behavior;
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {p}}};
  const std::string name = p.contains("behavior") ? behavior.get<std::string>() : "default";
  return load("punctuation_" + name, j);
}

TEST(HfFamilyStyle, PunctuationBehaviors) {
  constexpr int32_t a = 259, b = 260, bang = 261, q = 262, a_bang = 263, bang_q = 264,
                    bang_b = 265, dollar = 266, inv_q = 268, a_euro = 271;
  EXPECT_EQ(punctuation("Isolated")->encode("a!?b", false), (Ids{a, bang, q, b}));
  EXPECT_EQ(punctuation(nullptr)->encode("a!?b", false), (Ids{a, bang, q, b}));  // the default
  EXPECT_EQ(punctuation("Contiguous")->encode("a!?b", false), (Ids{a, bang_q, b}));
  EXPECT_EQ(punctuation("Removed")->encode("a!?b", false), (Ids{a, b}));
  EXPECT_EQ(punctuation("MergedWithPrevious")->encode("a!b", false), (Ids{a_bang, b}));
  // A delimiter right after a delimiter is not merged into it.
  EXPECT_EQ(punctuation("MergedWithPrevious")->encode("a!?b", false), (Ids{a_bang, q, b}));
  EXPECT_EQ(punctuation("MergedWithNext")->encode("a!b", false), (Ids{a, bang_b}));
  // ASCII punctuation includes symbols such as '$'; Unicode punctuation (Po '¿') counts too,
  // Unicode symbols ('€', Sc) do not.
  auto iso = punctuation("Isolated");
  EXPECT_EQ(iso->encode("a$b", false), (Ids{a, dollar, b}));
  EXPECT_EQ(iso->encode("a\u00bfb", false), (Ids{a, inv_q, b}));
  EXPECT_EQ(iso->encode("a\u20acb", false), (Ids{a_euro, b}));
  EXPECT_GT(punctuation("Removed")->max_piece_bytes(), size_t(1) << 20) << "it drops text";
}

}  // namespace
}  // namespace flashserve
