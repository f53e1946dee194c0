// TensorParallelRunner: builds the ranks on their own threads (parallel loading, each rank's CUDA
// device current on its thread for good), sizes one KV cache for all, and runs each step on every
// rank. Every rank takes the same decisions from the same plan (eager or graph replay, buffer
// growth), so their collectives always pair up. In a node group (parallel/node_group.h) the
// ranks are this node's share of the group's, node 0 sends each step's plan to the other nodes
// before running it, and those run it from the message (serve_node).
#include "model/tensor_parallel_runner.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "model/forward_runner.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/step_wire.h"
#include "parallel/communicator.h"
#include "parallel/node_group.h"
#include "parallel/rank_workers.h"
#include "parallel/shard_plan.h"

namespace flashserve {
namespace {

// The all-reduces of steps of up to 4 tokens go through NCCL symmetric memory where the NCCL
// build has it (docs/TENSOR_PARALLEL.md). Measured on 4 x H100, us
// per all-reduce of Llama-2-7B rows, NCCL default -> symmetric: at TP 2, 1 token 6.6 -> 4.2,
// 2: 6.6 -> 4.4, 4: 6.9 -> 6.2, 8: 7.0 -> 8.1, 16: 7.1 -> 11.4; at TP 4, 9.5 -> 4.5, 10.3 -> 4.7,
// 10.4 -> 6.8, 10.7 -> 10.0, 10.8 -> 14.3. Up to 4 tokens it wins at both sizes; larger steps
// keep the workspace. 7B batch-1 decode at TP 2: 270 -> 286 tokens/s.
constexpr int64_t kSymmetricReduceRows = 4;

class TensorParallelRunner final : public ForwardRunner {
 public:
  TensorParallelRunner(const LoadedModel& model, const ModelRunnerOptions& o)
      : config_(model.config()),
        group_(o.node_group),
        first_rank_(group_ ? group_->node_rank() * o.tensor_parallel_size : 0),
        workers_(o.tensor_parallel_size, [this] { abort_all(); }) {
    const int size = o.tensor_parallel_size;  // this process's ranks
    const int world = group_ ? group_->nnodes() * size : size;
    FS_CHECK(o.graph_max_batch >= 0, "graph_max_batch must be >= 0, got ", o.graph_max_batch);
    const bool cuda = uses_cuda(o);
    const int cores = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = std::max(1, cores / size);  // CPU: the cores shared out among the ranks
    if (group_) {
      comms_ = group_->make_communicators(size);  // NCCL on GPUs, else the TCP stand-in
      // A lost node aborts the collectives, so that a step waiting for it ends (with an error).
      group_->set_on_failure([this](const std::string&) { abort_all(); });
    } else {
      comms_ = cuda ? make_nccl_group(size) : make_local_group(size);
    }
    ranks_.resize(size_t(size));
    std::vector<KvCacheConfig> kv(static_cast<size_t>(size));
    try {
      workers_.run([&](int r) {
        Rank& k = ranks_[size_t(r)];
        k.backend = make_backend(o, r, threads);
        comms_[size_t(r)]->bind_stream(k.backend->native_stream());
        k.shard = TensorShard{make_shard_plan(config_, world, first_rank_ + r), comms_[size_t(r)].get()};
        k.model = std::make_unique<LlamaModel>(*k.backend, model, &k.shard);
        kv[size_t(r)] = kv_cache_config(*k.backend, config_, k.shard.plan.kv_heads, o);
      });
      // The scheduler's block ids hold on every rank: the smallest rank's count for all.
      int blocks = kv[0].num_blocks;
      for (const KvCacheConfig& c : kv) blocks = std::min(blocks, c.num_blocks);
      if (group_) blocks = int(group_->min_over_nodes(blocks));  // and on every node
      workers_.run([&](int r) {
        Rank& k = ranks_[size_t(r)];
        kv[size_t(r)].num_blocks = blocks;
        k.cache = std::make_unique<KvCache>(*k.backend, kv[size_t(r)]);
        if (cuda) k.model->set_graph_max_batch(o.graph_max_batch);
        // The all-reduced block outputs of steps of up to kSymmetricReduceRows tokens
        // (latency-bound all-reduces) in NCCL symmetric memory (none before NCCL 2.27: the
        // workspace serves them); a failure to allocate or register it is a startup error.
        if (cuda) {
          const size_t bytes = size_t(kSymmetricReduceRows) * size_t(config_.hidden_size) * 2;
          if (void* mem = comms_[size_t(r)]->symmetric_buffer(bytes))
            k.model->set_reduce_buffer(mem, kSymmetricReduceRows);
        }
      });
    } catch (...) {
      if (group_) group_->set_on_failure(nullptr);  // no destructor runs: forget `this` here
      release();
      throw;
    }
    name_ = ranks_[0].backend->name() + " x " + std::to_string(size) + " ranks, tensor parallel (" +
            comms_[0]->name() + ")";
    if (group_)
      name_ += ", node " + std::to_string(group_->node_rank()) + " of " +
               std::to_string(group_->nnodes()) + " (" + std::to_string(world) + " ranks in all)";
  }
  ~TensorParallelRunner() override {
    if (group_) group_->set_on_failure(nullptr);  // before the communicators go
    release();
  }

  // A node other than 0: runs each plan node 0 sends until it stops the group.
  void serve_node() {
    FS_CHECK(group_ && group_->node_rank() > 0, "serve_node on node 0 or outside a group");
    std::vector<int32_t> msg;
    while (receive(&msg)) forward(unpack_step_arrays(msg), nullptr, nullptr, nullptr);
  }

  const ModelConfig& config() const override { return config_; }
  std::string backend_name() const override { return name_; }
  int block_size() const override { return ranks_[0].cache->config().block_size; }
  int num_kv_blocks() const override { return ranks_[0].cache->config().num_blocks; }
  uint64_t graphs_recorded() const override { return ranks_[0].model->graphs_recorded(); }

 private:
  struct Rank {
    std::unique_ptr<Backend> backend;
    TensorShard shard;
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<KvCache> cache;
  };

  void forward(const StepPlan& plan, float* logits, int32_t* argmax, float* hidden) override {
    if (group_ && group_->node_rank() == 0) on_group([&] { group_->broadcast(pack_step_arrays(plan)); });
    // cuBLASLt loads a GEMM kernel's library the first time it runs that kernel, under a lock of
    // its own shared by the whole process, and the load waits for the GPU: if that GPU is busy
    // with an all-reduce waiting for another rank, and that rank's thread waits for the lock
    // before it can issue its side, neither moves again (seen on 4 H100s, cuda-gdb: one rank in
    // cuLibraryLoadData under cublasLtMatmul, the other three waiting on its lock, GPU 0 in
    // ncclDevKernel_AllReduce). So a step with row counts no step had before first runs those
    // products on every rank, with no collective in flight, and every rank has finished that
    // before any starts the step.
    if (ranks_[0].model->has_new_matmul_rows(plan))
      on_all_ranks([&](int r) { ranks_[size_t(r)].model->warm_up_matmuls(plan); });
    on_all_ranks([&](int r) {
      Rank& k = ranks_[size_t(r)];
      // Every rank holds the whole residual stream, so rank 0's hidden states are the model's.
      const bool first = first_rank_ + r == 0;
      k.model->forward(plan, *k.cache, first ? logits : nullptr, first ? argmax : nullptr,
                       first ? hidden : nullptr);
    });
  }

  void sample_rows(int32_t* ids, std::span<const int64_t> rows,
                   std::span<const SampleRequest> requests) override {
    on_all_ranks([&](int r) {  // on rank 0's thread: its device is current there
      if (r == 0) ranks_[0].backend->sample_rows(ids, ranks_[0].model->logits(), rows, requests);
    });
  }

  // A failed step leaves the ranks out of step with each other (and the group aborted): the
  // runner refuses every later step.
  void on_all_ranks(const std::function<void(int)>& fn) {
    on_group([&] { workers_.run(fn); });
  }

  // Runs fn; its error stops the runner. When the node group failed, its failure is the cause
  // (the ranks' errors only say that a collective was aborted or lost its peer).
  void on_group(const std::function<void()>& fn) {
    FS_CHECK(failed_.empty(), "the tensor-parallel group stopped after an earlier error: ", failed_);
    try {
      fn();
    } catch (const std::exception& e) {
      failed_ = group_ && group_->confirms_failure() ? group_->failure() : e.what();
      if (failed_ != e.what()) throw Error(failed_);
      throw;
    }
  }

  bool receive(std::vector<int32_t>* msg) {
    bool more = false;
    on_group([&] { more = group_->receive(msg); });
    return more;
  }

  void abort_all() {
    for (auto& c : comms_)
      if (c) c->abort();
  }

  // Each rank's state goes on its own thread (its device current), the communicators last.
  void release() {
    workers_.run([&](int r) {
      if (size_t(r) < ranks_.size()) {
        Rank& k = ranks_[size_t(r)];
        k.cache.reset();
        k.model.reset();
        k.backend.reset();
      }
      if (size_t(r) < comms_.size()) comms_[size_t(r)].reset();
    });
  }

  const ModelConfig config_;
  NodeGroup* const group_;   // null: this process alone
  const int first_rank_;     // this process's first rank in the group (0 alone)
  std::vector<std::unique_ptr<Communicator>> comms_;  // [size] one per rank
  std::vector<Rank> ranks_;                           // [size]
  std::string name_, failed_;
  RankWorkers workers_;  // last: its threads stop first
};

int group_size(const ModelRunnerOptions& o) {
  return o.node_group ? o.node_group->nnodes() * o.tensor_parallel_size : o.tensor_parallel_size;
}

}  // namespace

std::unique_ptr<ModelRunner> make_tensor_parallel_runner(const LoadedModel& model,
                                                         const ModelRunnerOptions& options) {
  check_tensor_parallel(model.config(), group_size(options));  // before any thread
  return std::make_unique<TensorParallelRunner>(model, options);
}

void run_tensor_parallel_worker(const LoadedModel& model, const ModelRunnerOptions& options) {
  FS_CHECK(options.node_group && options.node_group->node_rank() > 0,
           "run_tensor_parallel_worker on node 0 or outside a node group");
  check_tensor_parallel(model.config(), group_size(options));
  TensorParallelRunner(model, options).serve_node();
}

}  // namespace flashserve
