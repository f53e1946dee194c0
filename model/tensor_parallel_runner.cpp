// TensorParallelRunner: builds the ranks on their own threads (parallel loading, each rank's CUDA
// device current on its thread for good), sizes one KV cache for all, and runs each step on every
// rank. Every rank takes the same decisions from the same plan (eager or graph replay, buffer
// growth), so their collectives always pair up.
#include "model/tensor_parallel_runner.h"

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "model/forward_runner.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "parallel/communicator.h"
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
      : config_(model.config()), workers_(o.tensor_parallel_size, [this] { abort_all(); }) {
    const int size = o.tensor_parallel_size;
    FS_CHECK(o.graph_max_batch >= 0, "graph_max_batch must be >= 0, got ", o.graph_max_batch);
    const bool cuda = uses_cuda(o);
    const int cores = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    const int threads = std::max(1, cores / size);  // CPU: the cores shared out among the ranks
    comms_ = cuda ? make_nccl_group(size) : make_local_group(size);
    ranks_.resize(size_t(size));
    std::vector<KvCacheConfig> kv(static_cast<size_t>(size));
    try {
      workers_.run([&](int r) {
        Rank& k = ranks_[size_t(r)];
        k.backend = make_backend(o, r, threads);
        comms_[size_t(r)]->bind_stream(k.backend->native_stream());
        k.shard = TensorShard{make_shard_plan(config_, size, r), comms_[size_t(r)].get()};
        k.model = std::make_unique<LlamaModel>(*k.backend, model, &k.shard);
        kv[size_t(r)] = kv_cache_config(*k.backend, config_, k.shard.plan.kv_heads, o);
      });
      // The scheduler's block ids hold on every rank: the smallest rank's count for all.
      int blocks = kv[0].num_blocks;
      for (const KvCacheConfig& c : kv) blocks = std::min(blocks, c.num_blocks);
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
      release();
      throw;
    }
    name_ = ranks_[0].backend->name() + " x " + std::to_string(size) + " ranks, tensor parallel (" +
            comms_[0]->name() + ")";
  }
  ~TensorParallelRunner() override { release(); }

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
      k.model->forward(plan, *k.cache, r == 0 ? logits : nullptr, r == 0 ? argmax : nullptr,
                       r == 0 ? hidden : nullptr);
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
    FS_CHECK(failed_.empty(), "the tensor-parallel group stopped after an earlier error: ", failed_);
    try {
      workers_.run(fn);
    } catch (const std::exception& e) {
      failed_ = e.what();
      throw;
    }
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
  std::vector<std::unique_ptr<Communicator>> comms_;  // [size] one per rank
  std::vector<Rank> ranks_;                           // [size]
  std::string name_, failed_;
  RankWorkers workers_;  // last: its threads stop first
};

}  // namespace

std::unique_ptr<ModelRunner> make_tensor_parallel_runner(const LoadedModel& model,
                                                         const ModelRunnerOptions& options) {
  check_tensor_parallel(model.config(), options.tensor_parallel_size);  // before any thread
  return std::make_unique<TensorParallelRunner>(model, options);
}

}  // namespace flashserve
