// How far a prefix of some text is valid JSON: scans one JSON value from a position and says
// whether it is complete, could still be completed by more text, or breaks at a byte. The tool-call
// parsers use it to stream a call's arguments before the model has finished writing them.
#pragma once

#include <cstddef>
#include <string_view>

namespace flashserve::output_parsers {

enum class JsonStatus {
  kComplete,  // text[pos, end) is one whole JSON value
  kPartial,   // text[pos, text.size()) is a valid beginning of a value (end == text.size())
  kInvalid,   // text[pos, end) is a valid beginning, the byte at `end` cannot follow it
};

struct JsonSpan {
  JsonStatus status;
  size_t end;
};

// Scans the value starting exactly at text[pos] (no leading whitespace). Strict RFC 8259: no
// comments, no trailing commas, no raw control characters in strings. A number that reaches the
// end of the text is kPartial (more digits could follow). Iterative, so deep nesting is safe.
JsonSpan scan_json_value(std::string_view text, size_t pos);

// Space, tab, line feed or carriage return: the whitespace JSON allows between tokens.
inline bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The first position at or after pos that is not JSON whitespace (text.size() if none).
inline size_t skip_json_space(std::string_view text, size_t pos) {
  while (pos < text.size() && is_json_space(text[pos])) ++pos;
  return pos;
}

}  // namespace flashserve::output_parsers
