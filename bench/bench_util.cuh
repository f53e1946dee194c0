// Shared helpers for the CUDA benchmarks: event timing with an L2 flush between runs,
// percentile statistics, the device name, and JSON-line output (one record per configuration,
// printed to stdout; humans read stderr). Header-only and generic: no kernel-specific code.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace flashserve::bench {

struct Stats {
  double p10 = 0, p50 = 0, p90 = 0, mean = 0;
  int n = 0;
};

// Nearest-rank percentiles of `v` (copied, then sorted).
inline Stats compute_stats(std::vector<double> v) {
  Stats s;
  s.n = int(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    size_t i = size_t(std::lround(p * double(v.size() - 1)));
    return v[std::min(i, v.size() - 1)];
  };
  s.p10 = pct(0.10);
  s.p50 = pct(0.50);
  s.p90 = pct(0.90);
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  return s;
}

inline std::string device_name(int device = -1) {
  if (device < 0) CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

// Evicts L2 by writing a buffer of twice its size; call outside the timed region.
class L2Flusher {
 public:
  L2Flusher() {
    int dev = 0, l2 = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    bytes_ = std::max<size_t>(size_t(l2) * 2, size_t(64) << 20);
    CUDA_CHECK(cudaMalloc(&buf_, bytes_));
  }
  ~L2Flusher() { cudaFree(buf_); }
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;
  void flush(cudaStream_t stream) { CUDA_CHECK(cudaMemsetAsync(buf_, 0, bytes_, stream)); }

 private:
  void* buf_ = nullptr;
  size_t bytes_ = 0;
};

// Times `fn` (which enqueues work on `stream`) `iters` times after `warmup` runs, each timed
// run bracketed by its own pair of CUDA events and preceded by an untimed L2 flush (flush_l2).
// `before_timed`, when given, enqueues something once ahead of the timed runs (e.g. a spin
// kernel that holds them back so that they run back to back). Returns per-run times in
// microseconds.
inline std::vector<double> time_runs(const std::function<void()>& fn, cudaStream_t stream,
                                     int warmup = 10, int iters = 50, bool flush_l2 = true,
                                     const std::function<void()>& before_timed = {}) {
  static L2Flusher* flusher = new L2Flusher();  // one per process, lives until exit
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<cudaEvent_t> start(iters), stop(iters);
  for (int i = 0; i < iters; ++i) {
    CUDA_CHECK(cudaEventCreate(&start[i]));
    CUDA_CHECK(cudaEventCreate(&stop[i]));
  }
  if (before_timed) before_timed();
  for (int i = 0; i < iters; ++i) {
    if (flush_l2) flusher->flush(stream);
    CUDA_CHECK(cudaEventRecord(start[i], stream));
    fn();
    CUDA_CHECK(cudaEventRecord(stop[i], stream));
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start[i], stop[i]));
    us[i] = double(ms) * 1e3;
    CUDA_CHECK(cudaEventDestroy(start[i]));
    CUDA_CHECK(cudaEventDestroy(stop[i]));
  }
  return us;
}

// Builds one JSON object, in insertion order: JsonLine().add("bench", "x").add("n", 3).str().
class JsonLine {
 public:
  JsonLine& add(const std::string& key, const std::string& value) {
    field(key) << '"' << escape(value) << '"';
    return *this;
  }
  JsonLine& add(const std::string& key, const char* value) { return add(key, std::string(value)); }
  JsonLine& add(const std::string& key, bool value) {
    field(key) << (value ? "true" : "false");
    return *this;
  }
  JsonLine& add(const std::string& key, int value) {
    field(key) << value;
    return *this;
  }
  JsonLine& add(const std::string& key, long long value) {
    field(key) << value;
    return *this;
  }
  JsonLine& add(const std::string& key, double value) {
    if (std::isfinite(value)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", value);
      field(key) << buf;
    } else {
      field(key) << "null";
    }
    return *this;
  }
  std::string str() const { return "{" + os_.str() + "}"; }
  void print(FILE* f = stdout) const {
    std::fprintf(f, "%s\n", str().c_str());
    std::fflush(f);
  }

 private:
  std::ostringstream& field(const std::string& key) {
    if (!first_) os_ << ',';
    first_ = false;
    os_ << '"' << escape(key) << "\":";
    return os_;
  }
  static std::string escape(const std::string& s) {
    std::string r;
    for (char c : s) {
      if (c == '"' || c == '\\') {
        r += '\\';
        r += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        r += buf;
      } else {
        r += c;
      }
    }
    return r;
  }
  std::ostringstream os_;
  bool first_ = true;
};

}  // namespace flashserve::bench
