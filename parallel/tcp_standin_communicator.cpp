// The TCP stand-in communicator: a test double for ranks in several processes on the CPU. A
// star around rank 0: every collective is an all-gather through rank 0 (each rank sends its
// buffer, rank 0 sends everything back), and an all-reduce is that all-gather followed by the
// same fixed-order sum on every rank that the thread stand-in computes (local_communicator.cpp),
// so both give the same bits. Simple, not fast: kilobytes a collective on loopback.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "parallel/communicator.h"
#include "parallel/standin_sum.h"
#include "parallel/tcp_link.h"

namespace flashserve {
namespace {

constexpr const char* kAborted = "tensor-parallel group aborted: another rank failed";

// Blocking whole-buffer I/O; abort() shuts the sockets down, which ends a blocked call.
void write_all(int fd, const void* src, size_t n, const std::atomic<bool>& aborted) {
  const char* p = static_cast<const char*>(src);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    FS_CHECK(w > 0 && !aborted.load(), aborted.load() ? kAborted : "stand-in send failed: a rank is gone");
    p += w;
    n -= size_t(w);
  }
}

void read_all(int fd, void* dst, size_t n, const std::atomic<bool>& aborted) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    FS_CHECK(r > 0 && !aborted.load(), aborted.load() ? kAborted : "stand-in recv failed: a rank is gone");
    p += r;
    n -= size_t(r);
  }
}

struct Hello {
  uint64_t nonce;
  int32_t rank;
};

class TcpStandinCommunicator final : public Communicator {
 public:
  // rank 0: peers_[r] is rank r's socket (r >= 1); other ranks: peers_[0] is rank 0's.
  TcpStandinCommunicator(int rank, int world, std::vector<int> peers)
      : rank_(rank), world_(world), peers_(std::move(peers)) {}
  ~TcpStandinCommunicator() override {
    for (int fd : peers_)
      if (fd >= 0) close(fd);
  }
  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string name() const override { return "tcp stand-in (test double, fixed-order sums)"; }

  void all_reduce_sum(void* data, int64_t count, DType dtype) override {
    FS_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "all_reduce_sum of ",
             dtype_name(dtype), " (f32 or bf16)");
    const size_t bytes = size_t(count) * dtype_size(dtype);
    gathered_.resize(bytes * size_t(world_));
    all_gather(data, gathered_.data(), count, dtype);
    std::vector<const void*> in;
    for (int r = 0; r < world_; ++r) in.push_back(gathered_.data() + size_t(r) * bytes);
    fixed_order_sum(in, count, dtype, &sum_);
    store_sum(sum_, dtype, data);
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    FS_CHECK(!aborted_.load(), kAborted);
    const size_t bytes = size_t(count) * dtype_size(dtype);
    char* out = static_cast<char*>(recv);
    if (rank_ == 0) {
      if (bytes) std::memcpy(out, send, bytes);
      for (int r = 1; r < world_; ++r) read_all(peers_[size_t(r)], out + size_t(r) * bytes, bytes, aborted_);
      for (int r = 1; r < world_; ++r) write_all(peers_[size_t(r)], out, bytes * size_t(world_), aborted_);
    } else {
      write_all(peers_[0], send, bytes, aborted_);
      read_all(peers_[0], out, bytes * size_t(world_), aborted_);
    }
  }

  void barrier() override {
    std::vector<int32_t> all(static_cast<size_t>(world_));
    const int32_t one = 1;
    all_gather(&one, all.data(), 1, DType::kI32);
  }

  void abort() override {
    aborted_ = true;
    for (int fd : peers_)
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }

 private:
  const int rank_, world_;
  std::vector<int> peers_;
  std::atomic<bool> aborted_{false};
  std::vector<char> gathered_;  // [world, count] all ranks' buffers of an all-reduce
  std::vector<float> sum_;      // [count] their sum
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_tcp_standin_group(
    TcpListener* hub, const std::string& hub_addr, int hub_port, uint64_t nonce, int world,
    int first_rank, int count, Clock::time_point deadline) {
  FS_CHECK(count >= 1 && first_rank >= 0 && first_rank + count <= world, "stand-in ranks ",
           first_rank, "+", count, " of ", world);
  FS_CHECK((first_rank == 0) == (hub != nullptr), "the hub belongs to the process of rank 0");
  // Connect first (a connection completes in the listener's backlog before it is accepted, so
  // this process's own ranks can connect to its hub before it accepts), then accept.
  std::vector<std::vector<int>> peers(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const int rank = first_rank + i;
    if (rank == 0) continue;
    const int fd = tcp_connect_until(hub_addr, hub_port, deadline);
    const Hello h{nonce, rank};
    std::atomic<bool> never{false};
    write_all(fd, &h, sizeof h, never);
    peers[size_t(i)] = {fd};
  }
  if (hub) {
    std::vector<int>& mine = peers[0];
    mine.assign(size_t(world), -1);
    for (int joined = 1; joined < world;) {
      std::string peer;
      const int fd = hub->accept_until(deadline, &peer);
      FS_CHECK(fd >= 0, "stand-in: ", joined - 1, " of ", world - 1, " ranks connected by the deadline");
      Hello h{};
      std::atomic<bool> never{false};
      try {
        read_all(fd, &h, sizeof h, never);
      } catch (const Error&) {
        h.rank = -1;
      }
      if (h.nonce != nonce || h.rank < 1 || h.rank >= world || mine[size_t(h.rank)] >= 0) {
        close(fd);  // not one of this group's ranks
        continue;
      }
      mine[size_t(h.rank)] = fd;
      ++joined;
    }
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < count; ++i)
    out.push_back(std::make_unique<TcpStandinCommunicator>(first_rank + i, world, std::move(peers[size_t(i)])));
  return out;
}

}  // namespace flashserve
