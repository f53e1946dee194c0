// RankWorkers: a job counter under one mutex; each rank thread runs every job once.
#include "parallel/rank_workers.h"

#include "core/error.h"

namespace flashserve {

RankWorkers::RankWorkers(int size, std::function<void()> on_error)
    : on_error_(std::move(on_error)) {
  FS_CHECK(size >= 1, "RankWorkers: size ", size);
  for (int r = 0; r < size; ++r) threads_.emplace_back([this, r] { work(r); });
}

RankWorkers::~RankWorkers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankWorkers::run(const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  pending_ = size();
  error_ = nullptr;
  ++generation_;
  start_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void RankWorkers::work(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    std::exception_ptr err;
    try {
      (*job)(rank);
    } catch (...) {
      err = std::current_exception();
    }
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err, first = true;
    }
    if (first && on_error_) on_error_();  // outside the lock: it may wake other ranks
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace flashserve
