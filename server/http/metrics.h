// Server-side metrics (latency histograms, requests by HTTP status) and the Prometheus text
// exposition of GET /metrics, which also shows the engine's gauges and counters.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace flashserve {

// A cumulative Prometheus histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double x);
  // Appends the _bucket/_sum/_count lines for metric `name`.
  void render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  void observe_e2e(double seconds);
  void count_request(int http_status);
  void count_disconnect();
  // The whole /metrics page.
  std::string render(const EngineMetrics& engine) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_, tpot_, e2e_;
  std::map<int, uint64_t> requests_by_status_;
  uint64_t disconnects_ = 0;
};

}  // namespace flashserve
