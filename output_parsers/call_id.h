// Tool call ids, "call_" + 24 letters and digits, drawn from a seeded generator so that a request's
// ids are reproducible (tests, and a stream and a whole parse of the same output agree).
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace flashserve::output_parsers {

class CallIdGenerator {
 public:
  explicit CallIdGenerator(uint64_t seed) : rng_(seed) {}
  std::string next();

 private:
  std::mt19937_64 rng_;  // the standard fixes its sequence, so ids match across platforms
};

}  // namespace flashserve::output_parsers
