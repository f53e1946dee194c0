// Two small facts about JSON text that several folders need without a JSON library: the nesting
// depth of a text (a guard run before a recursive parser sees it) and the escape of a character
// inside a JSON string.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace flashserve {

// The bracket nesting depth, counted outside strings, so that hostile inputs (100k '[') are
// refused unparsed.
inline int json_nesting_depth(std::string_view text) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// Appends the escape of c inside a JSON string ("\\n", "\\u001f", ...) and returns true, or
// returns false when c stands for itself (the caller appends it).
inline bool append_json_escape(std::string& out, unsigned char c) {
  static const char* kHex = "0123456789abcdef";
  switch (c) {
    case '"': out += "\\\""; return true;
    case '\\': out += "\\\\"; return true;
    case '\n': out += "\\n"; return true;
    case '\t': out += "\\t"; return true;
    case '\r': out += "\\r"; return true;
    case '\b': out += "\\b"; return true;
    case '\f': out += "\\f"; return true;
    default:
      if (c >= 0x20) return false;
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      return true;
  }
}

}  // namespace flashserve
