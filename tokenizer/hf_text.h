// Text helpers for the tokenizer.json pipeline (header-only): GPT-2's byte-to-character table used
// by ByteLevel, UTF-8 decoding with Rust's from_utf8_lossy rule (what `tokenizers` applies when it
// turns bytes back into text), character iteration and the few Unicode predicates HF uses.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tokenizer/utf8.h"

namespace flashserve::hf {

inline void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// The code point of the valid UTF-8 character at s[i] (length n = utf8_sequence_length > 0).
inline uint32_t decode_utf8(std::string_view s, size_t i, size_t n) {
  const auto b = [&](size_t k) { return uint32_t(static_cast<unsigned char>(s[i + k])); };
  if (n == 1) return b(0);
  if (n == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (n == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

// GPT-2's reversible byte <-> printable character map: printable Latin-1 bytes map to themselves,
// the other 68 bytes to U+0100 and up, in byte order. byte_to_char[b] is the UTF-8 of b's char.
struct ByteLevelTable {
  std::array<std::string, 256> byte_to_char;
  std::array<int16_t, 0x180> char_to_byte;  // code point -> byte, -1 if none (all are < 0x180)
  ByteLevelTable() {
    char_to_byte.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const uint32_t cp = printable ? b : next++;
      append_utf8(byte_to_char[b], cp);
      char_to_byte[cp] = int16_t(b);
    }
  }
};

inline const ByteLevelTable& byte_level_table() {
  static const ByteLevelTable table;
  return table;
}

// Bytes as text the way Rust's String::from_utf8_lossy does it: each maximal invalid subpart
// (a lone byte, or the valid start of a sequence cut short) becomes one U+FFFD.
inline std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = utf8_sequence_length(s, i);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    // How many bytes form a valid prefix of some sequence (at least the lead byte).
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t want = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) want = 2;
    else if (c >= 0xE0 && c <= 0xEF) want = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) want = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    size_t k = 1;
    if (want > 0 && i + 1 < s.size()) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      if (c1 >= lo && c1 <= hi) {
        k = 2;
        while (k < want && i + k < s.size() &&
               (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80)
          ++k;
      }
    }
    out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

// Rust's char::is_whitespace (the Unicode White_Space property).
inline bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Calls fn(code_point, byte_offset, byte_length) for each character of valid UTF-8 `s`.
template <class Fn>
void for_each_char(std::string_view s, Fn&& fn) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence_length(s, i);
    if (n == 0) n = 1;  // not reached for validated text; keeps the loop finite
    fn(decode_utf8(s, i, n), i, n);
    i += n;
  }
}

}  // namespace flashserve::hf
