// RankWorkers: one thread per tensor-parallel rank, alive as long as the object, so that whatever
// a rank keeps per thread (its CUDA device, its backend's stream and graphs) stays put. run(fn)
// runs fn(rank) on every rank's thread at once and returns when all are done.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace flashserve {

class RankWorkers {
 public:
  // on_error runs (once per run, on the failing rank's thread) as soon as one rank throws: it
  // must make the other ranks stop waiting for the failed one (Communicator::abort).
  RankWorkers(int size, std::function<void()> on_error);
  ~RankWorkers();
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  int size() const { return int(threads_.size()); }
  // Runs fn(rank) on every rank's thread and waits for all; rethrows the first exception (the
  // cause: the others' come after on_error).
  void run(const std::function<void(int rank)>& fn);

 private:
  void work(int rank);

  std::function<void()> on_error_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace flashserve
