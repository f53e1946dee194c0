// LoadProgress (see load_progress.h): throttled progress lines on stderr for slow model loads.
#include "weights/load_progress.h"

#include <utility>

namespace flashserve {

namespace {
constexpr double kQuietSeconds = 1.0;    // loads faster than this print nothing
constexpr double kPrintEverySeconds = 0.5;
}  // namespace

LoadProgress::LoadProgress(std::string what, int total_steps, std::FILE* out)
    : what_(std::move(what)), total_steps_(total_steps), out_(out),
      start_(std::chrono::steady_clock::now()) {}

double LoadProgress::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void LoadProgress::print(const char* verb) {
  const double t = elapsed_s();
  const double mb = double(bytes_) / 1e6;
  std::fprintf(out_, "flashserve: %s %s: %d/%d layers, %.0f MB in %.1f s (%.0f MB/s)\n", verb,
               what_.c_str(), steps_, total_steps_, mb, t, t > 0 ? mb / t : 0.0);
  std::fflush(out_);
  last_print_s_ = t;
  printed_ = true;
}

void LoadProgress::step(int64_t bytes) {
  ++steps_;
  bytes_ += bytes;
  const double t = elapsed_s();
  if (t >= kQuietSeconds && t - last_print_s_ >= kPrintEverySeconds && steps_ < total_steps_)
    print("loading");
}

void LoadProgress::finish() {
  if (printed_ || elapsed_s() >= kQuietSeconds) print("loaded");
}

}  // namespace flashserve
