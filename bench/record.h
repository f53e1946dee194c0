// What the op benchmarks' programs share: the fields every JSON line starts with (which record,
// on which GPU, by which command, for which model shape and how many rows (tokens) per step),
// printing a line, and the error frame of their main.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

namespace flashserve::bench {

inline nlohmann::ordered_json record_head(const std::string& bench, const std::string& gpu,
                                  const std::string& command, const std::string& shape, int m) {
  return {{"bench", bench}, {"gpu", gpu}, {"command", command}, {"shape", shape}, {"m", m}};
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
