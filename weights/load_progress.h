// LoadProgress: the "loading weights" lines a user sees while a large model loads. Silent when the
// whole load takes under a second (small models, tests); past that it prints, to stderr, how far
// it is (steps and bytes) and the rate, at most twice a second, and a last line when done.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace flashserve {

class LoadProgress {
 public:
  // what: names the load ("weights of /models/x"); total_steps: e.g. the number of layers.
  LoadProgress(std::string what, int total_steps, std::FILE* out = stderr);
  // One more step done, which read `bytes` of weights.
  void step(int64_t bytes);
  // The final line (only when something was printed before, or the load took over a second).
  void finish();

 private:
  double elapsed_s() const;
  void print(const char* verb);

  std::string what_;
  int total_steps_ = 0, steps_ = 0;
  int64_t bytes_ = 0;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_;
  double last_print_s_ = 0;
  bool printed_ = false;
};

}  // namespace flashserve
