// Sets of Unicode code points (the regex compiler's character classes) and how one becomes
// grammar: the UTF-8 byte sequences of its code points, written either raw (guided_regex, choices)
// or as they appear inside a JSON string literal (escapes for '"', '\' and control characters).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace flashserve::structured {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

class CharSet {
 public:
  CharSet() = default;
  static CharSet range(uint32_t lo, uint32_t hi);
  static CharSet any();  // every scalar value (surrogates excluded)
  void add(uint32_t lo, uint32_t hi);
  void add(const CharSet& other);
  CharSet complement() const;  // within [0, kMaxCodePoint], surrogates excluded
  CharSet intersect(const CharSet& other) const;
  bool empty() const { return ranges_.empty(); }
  bool contains(uint32_t c) const;
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  void normalize();
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;  // sorted, disjoint, inclusive
};

enum class CharContext { kRaw, kJsonString };

// A rule matching exactly one character of `set`, as bytes in `context`.
Sym char_set_rule(GrammarBuilder& b, const CharSet& set, CharContext context);

}  // namespace flashserve::structured
