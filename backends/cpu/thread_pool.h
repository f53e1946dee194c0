// ThreadPool: the CPU backend's workers. run(n, fn) calls fn(chunk) for chunk in [0, n) on the
// caller plus up to size() - 1 worker threads and returns when all are done, rethrowing the
// first exception; one run at a time.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flashserve {

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void run(int num_chunks, const std::function<void(int)>& fn) {
    num_chunks = std::min(num_chunks, size());
    if (num_chunks <= 1) {
      if (num_chunks == 1) fn(0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      num_chunks_ = num_chunks;
      pending_ = int(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
    std::exception_ptr mine;
    try {
      fn(0);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      int chunks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        chunks = num_chunks_;
      }
      std::exception_ptr err;
      if (index < chunks) {
        try {
          (*job)(index);
        } catch (...) {
          err = std::current_exception();
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int num_chunks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace flashserve
