// Where a stream must hold text back: the start of the longest tail of the text that is a proper
// beginning of a marker ("<tool" of "<tool_call>"), which more text may complete.
#pragma once

#include <algorithm>
#include <string_view>

namespace flashserve::output_parsers {

// The start of the longest tail of text[from, end) that is a proper prefix of marker, or
// text.size() when there is none.
inline size_t partial_marker_start(std::string_view text, size_t from, std::string_view marker) {
  if (marker.empty()) return text.size();
  for (size_t k = std::min(marker.size() - 1, text.size() - from); k > 0; --k) {
    if (text.substr(text.size() - k) == marker.substr(0, k)) return text.size() - k;
  }
  return text.size();
}

}  // namespace flashserve::output_parsers
