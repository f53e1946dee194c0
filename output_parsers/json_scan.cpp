// scan_json_value: a byte-level JSON validator that also answers "valid so far" for a prefix.
// Strings, numbers and literals are scanned by their own small loops; containers keep an explicit
// stack of open brackets so hostile nesting cannot exhaust the call stack.
#include "output_parsers/json_scan.h"

#include <string>

namespace flashserve::output_parsers {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// text[i] == '"'.
JsonSpan scan_string(std::string_view text, size_t i) {
  size_t j = i + 1;
  while (j < text.size()) {
    const char c = text[j];
    if (c == '"') return {JsonStatus::kComplete, j + 1};
    if (static_cast<unsigned char>(c) < 0x20) return {JsonStatus::kInvalid, j};
    if (c != '\\') {
      ++j;
      continue;
    }
    if (j + 1 == text.size()) break;
    const char e = text[j + 1];
    if (e != 'u') {
      if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        return {JsonStatus::kInvalid, j + 1};
      }
      j += 2;
      continue;
    }
    for (size_t k = j + 2; k < j + 6; ++k) {
      if (k == text.size()) return {JsonStatus::kPartial, text.size()};
      if (!is_hex(text[k])) return {JsonStatus::kInvalid, k};
    }
    j += 6;
  }
  return {JsonStatus::kPartial, text.size()};
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? ; the states are named after what was read last.
enum class Num { kStart, kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

bool number_step(Num& n, char c) {
  const bool digit = is_digit(c), exp = c == 'e' || c == 'E';
  switch (n) {
    case Num::kStart: if (c == '-') { n = Num::kMinus; return true; } [[fallthrough]];
    case Num::kMinus: if (c == '0') { n = Num::kZero; return true; }
                      if (digit) { n = Num::kInt; return true; } return false;
    case Num::kInt: if (digit) return true; [[fallthrough]];
    case Num::kZero: if (c == '.') { n = Num::kDot; return true; }
                     if (exp) { n = Num::kE; return true; } return false;
    case Num::kDot: if (digit) { n = Num::kFrac; return true; } return false;
    case Num::kFrac: if (digit) return true;
                     if (exp) { n = Num::kE; return true; } return false;
    case Num::kE: if (c == '+' || c == '-') { n = Num::kESign; return true; } [[fallthrough]];
    case Num::kESign: if (digit) { n = Num::kExp; return true; } return false;
    case Num::kExp: return digit;
  }
  return false;
}

JsonSpan scan_number(std::string_view text, size_t i) {
  Num n = Num::kStart;
  for (size_t j = i; j < text.size(); ++j) {
    if (number_step(n, text[j])) continue;
    const bool can_end = n == Num::kZero || n == Num::kInt || n == Num::kFrac || n == Num::kExp;
    return {can_end ? JsonStatus::kComplete : JsonStatus::kInvalid, j};
  }
  return {JsonStatus::kPartial, text.size()};  // more digits could follow
}

JsonSpan scan_literal(std::string_view text, size_t i) {
  const std::string_view word = text[i] == 't' ? "true" : text[i] == 'f' ? "false" : "null";
  for (size_t k = 0; k < word.size(); ++k) {
    if (i + k == text.size()) return {JsonStatus::kPartial, text.size()};
    if (text[i + k] != word[k]) return {JsonStatus::kInvalid, i + k};
  }
  return {JsonStatus::kComplete, i + word.size()};
}

JsonSpan scan_scalar(std::string_view text, size_t i) {
  const char c = text[i];
  if (c == '"') return scan_string(text, i);
  if (c == '-' || is_digit(c)) return scan_number(text, i);
  if (c == 't' || c == 'f' || c == 'n') return scan_literal(text, i);
  return {JsonStatus::kInvalid, i};
}

enum class Expect { kValue, kValueOrClose, kKey, kKeyOrClose, kColon, kCommaOrClose };

}  // namespace

JsonSpan scan_json_value(std::string_view text, size_t pos) {
  std::string open;  // the containers not closed yet, '{' or '[', innermost last
  Expect expect = Expect::kValue;
  size_t i = pos;
  while (true) {
    if (!open.empty()) i = skip_json_space(text, i);
    if (i >= text.size()) return {JsonStatus::kPartial, text.size()};
    const char c = text[i];
    const char close = open.empty() ? 0 : (open.back() == '{' ? '}' : ']');
    if (expect == Expect::kColon) {
      if (c != ':') return {JsonStatus::kInvalid, i};
      ++i;
      expect = Expect::kValue;
      continue;
    }
    if (expect == Expect::kCommaOrClose && c == ',') {
      ++i;
      expect = close == '}' ? Expect::kKey : Expect::kValue;
      continue;
    }
    if ((expect == Expect::kCommaOrClose || expect == Expect::kKeyOrClose ||
         expect == Expect::kValueOrClose) && c == close) {
      open.pop_back();
      ++i;
    } else if (expect == Expect::kCommaOrClose) {
      return {JsonStatus::kInvalid, i};
    } else if (expect == Expect::kKey || expect == Expect::kKeyOrClose) {
      if (c != '"') return {JsonStatus::kInvalid, i};
      const JsonSpan key = scan_string(text, i);
      if (key.status != JsonStatus::kComplete) return key;
      i = key.end;
      expect = Expect::kColon;
      continue;
    } else if (c == '{' || c == '[') {
      open.push_back(c);
      ++i;
      expect = c == '{' ? Expect::kKeyOrClose : Expect::kValueOrClose;
      continue;
    } else {
      const JsonSpan s = scan_scalar(text, i);
      if (s.status != JsonStatus::kComplete) return s;
      i = s.end;
    }
    // A value ended just before i.
    if (open.empty()) return {JsonStatus::kComplete, i};
    expect = Expect::kCommaOrClose;
  }
}

}  // namespace flashserve::output_parsers
