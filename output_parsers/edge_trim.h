// Whitespace at the edges of a streamed text: leading whitespace is dropped and trailing whitespace
// is held until more text follows it, so that the pieces sent join to the trimmed whole text.
#pragma once

#include <string>
#include <string_view>

#include "output_parsers/json_scan.h"

namespace flashserve::output_parsers {

// `text` without whitespace (space, tab, LF, CR) at either end.
inline std::string_view trim_space(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && is_json_space(text[b])) ++b;
  while (e > b && is_json_space(text[e - 1])) --e;
  return text.substr(b, e - b);
}

class EdgeTrim {
 public:
  // The part of the next raw piece that can be sent now. At the end, the held whitespace is simply
  // never sent.
  std::string push(std::string_view raw) {
    if (!started_) {
      size_t b = 0;
      while (b < raw.size() && is_json_space(raw[b])) ++b;
      raw.remove_prefix(b);
      if (raw.empty()) return {};
      started_ = true;
    }
    size_t e = raw.size();
    while (e > 0 && is_json_space(raw[e - 1])) --e;
    if (e == 0) {
      held_ += raw;
      return {};
    }
    std::string out = std::move(held_);
    out += raw.substr(0, e);
    held_ = std::string(raw.substr(e));
    return out;
  }

 private:
  bool started_ = false;  // a non-space byte was sent
  std::string held_;      // whitespace after the last byte sent
};

}  // namespace flashserve::output_parsers
