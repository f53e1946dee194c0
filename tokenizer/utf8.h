// Small UTF-8 helpers shared by the tokenizer and the streaming detokenizer (header-only).
// "Valid" means RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
#pragma once

#include <cstddef>
#include <string_view>

namespace flashserve {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if none starts there (invalid or
// cut off by the end of s).
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return 0;
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  return n;
}

// Byte offset of the first invalid or incomplete sequence, or s.size() when all of s is valid.
inline size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return i;
}

inline bool is_valid_utf8(std::string_view s) { return utf8_valid_prefix(s) == s.size(); }

}  // namespace flashserve
