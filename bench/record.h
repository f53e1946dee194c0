// The fields every op benchmark's JSON line starts with: which record, on which GPU, by which
// command, for which model shape and how many rows (tokens) per step.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace flashserve::bench {

inline nlohmann::ordered_json record_head(const std::string& bench, const std::string& gpu,
                                  const std::string& command, const std::string& shape, int m) {
  return {{"bench", bench}, {"gpu", gpu}, {"command", command}, {"shape", shape}, {"m", m}};
}

}  // namespace flashserve::bench
