// parallel/: the plumbing of tensor parallelism: which slice of a model each rank holds
// (shard_plan.h), the collectives that join the slices (this header: NCCL on GPUs, a thread-based
// stand-in on the CPU), the order partial sums are added in (reduction_order.h), one thread
// per rank (rank_workers.h) and the nodes of a group over several hosts (node_group.h).
// docs/TENSOR_PARALLEL.md and docs/DEPLOY.md have the design.
//
// Communicator: one rank's handle on a group of ranks. Every rank of the group makes the same
// calls, with the same counts and dtypes, in the same order (a collective waits for all of them).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace flashserve {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "nccl" or "local (...)", for messages

  // The device stream this rank's collectives are queued on (cudaStream_t: the rank's backend's
  // stream, so that they run in order with its ops and CUDA graphs record them). The stand-in
  // has no stream and ignores it.
  virtual void bind_stream(void* stream) {}

  // data becomes, on every rank, the elementwise sum over the ranks (f32 or bf16; in place).
  // NCCL queues it on the bound stream; the stand-in is done when it returns.
  virtual void all_reduce_sum(void* data,  // [count] this rank's memory (device for NCCL)
                              int64_t count, DType dtype) = 0;
  // recv = rank 0's send, then rank 1's, ... (any dtype).
  virtual void all_gather(const void* send,  // [count]
                          void* recv,        // [size() * count]
                          int64_t count, DType dtype) = 0;
  // Device memory of `bytes` (the same on every rank) whose all-reduces may take a faster path:
  // NCCL's symmetric memory (ncclMemAlloc'd, registered as a window with NCCL_WIN_COLL_SYMMETRIC;
  // NCCL 2.27+ has all-reduce kernels for such windows built for small messages over NVLink).
  // Null where the communicator has none (the stand-in, older NCCL). A collective call: every
  // rank calls it at once. One per communicator, freed with it.
  virtual void* symmetric_buffer(size_t bytes) { return nullptr; }
  // Returns once every rank got here and (NCCL) this rank's queued collectives are done.
  virtual void barrier() = 0;
  // Called when a rank failed: the collectives of this group throw from now on (also those
  // that are waiting), instead of waiting forever for the failed rank. Not undone.
  virtual void abort() = 0;
};

// The CPU stand-in (parallel/local_communicator.cpp): `size` handles, one per rank, for ranks
// that are threads of this process. Sums are added in reduction_order.h's fixed order, so
// results do not depend on timing: bitwise reproducible.
std::vector<std::unique_ptr<Communicator>> make_local_group(int size);

// NCCL (parallel/nccl_communicator.cpp): one communicator per GPU 0..size-1 of this process
// (ncclCommInitAll), NVLink SHARP (NCCL_NVLS_ENABLE) turned off first. Throws when built without
// NCCL or when fewer than `size` GPUs are visible.
std::vector<std::unique_ptr<Communicator>> make_nccl_group(int size);
bool nccl_available();  // built with NCCL (no GPU needed)

// Ranks spread over processes (parallel/node_group.h): this process holds global ranks
// first_rank .. first_rank + count - 1 of `world`, on its GPUs 0..count-1. `unique_id` is
// nccl_unique_id()'s bytes, made once by the group's first process and handed to all
// (ncclCommInitRank inside one ncclGroupStart/End). Throws as make_nccl_group does.
std::string nccl_unique_id();
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::string& unique_id, int world,
                                                           int first_rank, int count);

// The CPU stand-in for ranks spread over processes: a test double for the multi-process path
// (CPU backends, loopback), never a way to serve. Every rank connects to rank 0's `hub`
// (hub_addr:hub_port) and collectives gather there: all_reduce_sum adds in reduction_order.h's
// order as make_local_group does, so results are bitwise those of one process. `hub` is the
// listener on the process holding rank 0 (null elsewhere); `nonce` ties the connections to the
// group. Connections are made and accepted before `deadline`; abort() shuts them down.
class TcpListener;
std::vector<std::unique_ptr<Communicator>> make_tcp_standin_group(
    TcpListener* hub, const std::string& hub_addr, int hub_port, uint64_t nonce, int world,
    int first_rank, int count, std::chrono::steady_clock::time_point deadline);

// This build, as the nodes of a group compare it: the source revision at configure time, the
// compiler, and whether CUDA and NCCL are in (parallel/build_id.cpp).
std::string build_id();

// Call at the top of main(), before any CUDA call, in a program that may run `tensor_parallel_size`
// ranks on GPUs: for more than one rank it sets CUDA_MODULE_LOADING=EAGER (unless the user set it),
// so that every kernel is loaded when each GPU's context starts. With CUDA's default, lazy
// loading, the first launch of a kernel loads its module and waits for the GPU's queued work to
// drain while holding a lock other CUDA calls need; a GPU whose NCCL kernel waits for a peer rank
// that is itself stuck behind such a load never drains (docs/TENSOR_PARALLEL.md, "A deadlock
// between ranks").
void prepare_cuda_for_tensor_parallelism(int tensor_parallel_size);

}  // namespace flashserve
