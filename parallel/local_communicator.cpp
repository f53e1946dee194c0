// The CPU stand-in communicator: ranks are threads of this process sharing one LocalGroup. A
// collective is two rendezvous: every rank posts its buffer, each computes the whole result from
// all posted buffers into its own scratch (the same code in the same order on every rank, so
// every rank gets the same bits), the second rendezvous says nobody reads the posted buffers any
// more, and each rank writes its result in place. Sums: standin_sum.h.
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/standin_sum.h"

namespace flashserve {
namespace {

class LocalGroup {
 public:
  explicit LocalGroup(int size) : size_(size), posted_(size_t(size), nullptr) {}
  int size() const { return size_; }

  // Posts this rank's buffer and waits for every rank's; returns all of them.
  const std::vector<const void*>& post(int rank, const void* data) {
    posted_[size_t(rank)] = data;
    rendezvous();
    return posted_;
  }

  // Waits until every rank of the group got here (a barrier that counts generations).
  void rendezvous() {
    std::unique_lock<std::mutex> lock(mu_);
    check_not_aborted();
    const uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    if (generation_ == gen) check_not_aborted();
  }

  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  void check_not_aborted() const {
    FS_CHECK(!aborted_, "tensor-parallel group aborted: another rank failed");
  }

  const int size_;
  std::vector<const void*> posted_;  // [size] each rank's buffer of the current collective
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "local (threads, fixed-order sums)"; }

  void all_reduce_sum(void* data, int64_t count, DType dtype) override {
    FS_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "all_reduce_sum of ",
             dtype_name(dtype), " (f32 or bf16)");
    fixed_order_sum(group_->post(rank_, data), count, dtype, &sum_);
    group_->rendezvous();  // nobody reads the posted buffers any more: each rank may overwrite its own
    store_sum(sum_, dtype, data);
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    const size_t bytes = size_t(count) * dtype_size(dtype);
    const std::vector<const void*>& in = group_->post(rank_, send);
    for (int r = 0; r < size(); ++r)
      if (bytes) std::memcpy(static_cast<char*>(recv) + size_t(r) * bytes, in[size_t(r)], bytes);
    group_->rendezvous();  // the senders may reuse their buffers
  }

  void barrier() override { group_->rendezvous(); }
  void abort() override { group_->abort(); }

 private:
  std::shared_ptr<LocalGroup> group_;
  const int rank_;
  std::vector<float> sum_;  // [count] this rank's copy of the result
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(int size) {
  FS_CHECK(size >= 1, "a group needs at least one rank, got ", size);
  auto group = std::make_shared<LocalGroup>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LocalCommunicator>(group, r));
  return out;
}

}  // namespace flashserve
