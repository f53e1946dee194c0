// Helpers for the structured/ tests: byte-level and synthetic vocabularies, a whole-text match
// through the grammar's automaton, and mask bit access.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/matcher.h"
#include "structured/stack_automaton.h"

namespace flashserve::structured::testing {

// Token b (0..255) is the byte b; token 256 is the stop token.
inline TokenVocabulary byte_vocab() {
  TokenVocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  v.token_bytes.push_back("");
  v.stop_ids = {256};
  return v;
}

// Every byte, plus tokens that span several grammar elements, partial UTF-8 characters, and an
// unused padding id; the stop token is the last id.
inline TokenVocabulary synthetic_vocab() {
  TokenVocabulary v = byte_vocab();
  v.token_bytes.pop_back();
  for (const char* t : {"{\"", "\":", "\",", "\"}", "},{\"", "]}", "[{", "true", "false", "null",
                        "\":\"", "\",\"", "0.", "12", "-1", "e+", "\\u00", "\\\"", "\xC3\xA9", "\xC3",
                        "\xE2\x82", "\xE2\x82\xAC", "\": ", ", ", "name", "abc", "2024-", "-02-", "T12:",
                        ":00Z", "@", ".com", "red", "}]", "[]", "{}", "\"\"", "00", "99", "\"a\":", "foo", "bar"})
    v.token_bytes.push_back(t);
  v.token_bytes.push_back("");  // padding: never allowed
  v.token_bytes.push_back("");
  v.stop_ids = {static_cast<int32_t>(v.token_bytes.size() - 1)};
  return v;
}

inline bool matches(const Grammar& g, std::string_view text) {
  StackAutomaton a(g);
  int32_t s = a.initial();
  for (char c : text) {
    s = a.step(s, static_cast<uint8_t>(c));
    if (s == StackAutomaton::kDead) return false;
  }
  return a.accepting(s);
}

inline bool bit(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id / 32] >> (id % 32)) & 1u; }

}  // namespace flashserve::structured::testing
