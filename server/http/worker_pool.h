// WorkerPool: the fixed set of threads ConnectionFront hands complete requests to. A pool that
// may not queue never makes a job wait behind busy workers: try_post() fails instead, so the
// caller can answer 503 at once rather than let a request wait for a thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flashserve {

class WorkerPool {
 public:
  // `may_queue` false: try_post() refuses a job when every thread is busy.
  WorkerPool(int threads, bool may_queue);
  ~WorkerPool() { shutdown(); }

  // Counts jobs taken or waiting rather than idle threads, so it is right from the start, before
  // the threads have run. False after shutdown().
  bool try_post(std::function<void()> fn);

  // Runs what is queued, then joins.
  void shutdown();

 private:
  void work();

  const int size_;
  const bool may_queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int busy_ = 0;
  bool stopping_ = false;
};

}  // namespace flashserve
