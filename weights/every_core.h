// for_each_on_every_core: independent jobs of weights/ (the conversions at load: FP8
// quantization, int4 and block-FP8 dequantization; the random-model writer's shards) run on every
// core; the first exception any job throws is rethrown once all have stopped.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flashserve {

// Calls job(i) for every i in [0, n), spread over the hardware threads (the caller is one).
inline void for_each_on_every_core(size_t n, const std::function<void(size_t)>& job) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto work = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        job(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t count = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), n);
  for (size_t i = 1; i < count; ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace flashserve
