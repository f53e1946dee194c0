// WorkerPool (see worker_pool.h): a mutex-guarded job queue and the threads that drain it.
#include "server/http/worker_pool.h"

namespace flashserve {

WorkerPool::WorkerPool(int threads, bool may_queue) : size_(threads), may_queue_(may_queue) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

bool WorkerPool::try_post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || (!may_queue_ && busy_ + int(jobs_.size()) >= size_)) return false;
  jobs_.push_back(std::move(fn));
  cv_.notify_one();
  return true;
}

void WorkerPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void WorkerPool::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    auto fn = std::move(jobs_.front());
    jobs_.pop_front();
    ++busy_;
    lock.unlock();
    fn();
    lock.lock();
    --busy_;
  }
}

}  // namespace flashserve
