// What the op benchmarks' programs share: the fields every JSON line starts with (which record,
// on which GPU, by which command, for which model shape and how many rows (tokens) per step),
// printing a line, percentiles, and the error frame of their main.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace flashserve::bench {

// The p-quantile of `v` (0 <= p <= 1): the element at rank round(p * (n - 1)); 0 for none.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p * double(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

inline nlohmann::ordered_json record_head(const std::string& bench, const std::string& gpu,
                                  const std::string& command, const std::string& shape, int m) {
  return {{"bench", bench}, {"gpu", gpu}, {"command", command}, {"model", shape}, {"shape", shape},
          {"m", m}};
}

// One JSON line on stdout, flushed: a later failure loses no finished record.
template <class Json>  // nlohmann::json or nlohmann::ordered_json
void print_record(const Json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// Runs a program's body; an error ends it with "PROGRAM: message" on stderr and exit status 1.
inline int run_guarded(const char* program, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
  return 0;
}

}  // namespace flashserve::bench
