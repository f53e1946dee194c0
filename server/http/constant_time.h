// Comparison of secrets (the API key) in time that does not depend on where the inputs first
// differ, so a client cannot find the key byte by byte by timing 401s. Only the length leaks.
#pragma once

#include <algorithm>
#include <string_view>

namespace flashserve {

inline bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer input is visited and nothing branches on the data.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

}  // namespace flashserve
