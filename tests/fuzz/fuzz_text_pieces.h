// Helpers of the output-parser fuzz targets: model-like text from fuzz bytes (bytes 1-15 stand for
// the tags and JSON fragments the parsers look for, so random inputs reach them) and random cuts of
// it into stream deltas.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>

#include <string>
#include <string_view>
#include <vector>

namespace flashserve::fuzz {

inline std::string expand_fragments(const std::string& raw) {
  static const char* const kFragments[16] = {
      "",         "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>",
      "{\"name\": \"f\", ", "\"arguments\": ", "\"parameters\": ", "{\"a\": [1, \"é\"]}",
      "<think>",  "</think>",    "}",            "\n",           "; ",     "\"x\""};
  std::string text;
  for (char c : raw) {
    const auto b = static_cast<unsigned char>(c);
    if (b > 0 && b < 16) {
      text += kFragments[b];
    } else {
      text += c;
    }
  }
  return text;
}

// Cuts text into pieces of the sizes given (the rest in one piece once the sizes run out).
inline std::vector<std::string_view> cut_pieces(std::string_view text, const std::vector<size_t>& sizes) {
  std::vector<std::string_view> pieces;
  size_t pos = 0;
  for (size_t k = 0; pos < text.size(); ++k) {
    const size_t n = k < sizes.size() ? std::min(sizes[k], text.size() - pos) : text.size() - pos;
    pieces.push_back(text.substr(pos, n));
    pos += n;
  }
  return pieces;
}

inline std::vector<size_t> consume_cut_sizes(FuzzedDataProvider& in) {
  std::vector<size_t> sizes(in.ConsumeIntegralInRange<int>(0, 64));
  for (auto& s : sizes) s = in.ConsumeIntegralInRange<size_t>(0, 12);
  return sizes;
}

}  // namespace flashserve::fuzz
