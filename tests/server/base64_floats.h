// Decodes the base64 of little-endian float32 bytes (OpenAI's encoding_format "base64"), written
// here independently of the server's encoder, for the embeddings tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace flashserve::testing {

inline std::vector<float> floats_from_base64(const std::string& s) {
  auto value = [](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return uint32_t(c - 'A');
    if (c >= 'a' && c <= 'z') return uint32_t(c - 'a' + 26);
    if (c >= '0' && c <= '9') return uint32_t(c - '0' + 52);
    return c == '+' ? 62u : 63u;  // '/'
  };
  std::vector<unsigned char> bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    acc = (acc << 6) | value(c);
    bits += 6;
    if (bits >= 8) bytes.push_back(uint8_t(acc >> (bits -= 8)));
  }
  std::vector<float> out(bytes.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint32_t u = uint32_t(bytes[4 * i]) | uint32_t(bytes[4 * i + 1]) << 8 |
                       uint32_t(bytes[4 * i + 2]) << 16 | uint32_t(bytes[4 * i + 3]) << 24;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

}  // namespace flashserve::testing
