// model/: runs one step's plan through a model's forward pass (Llama family: layer graph, weight
// binding, KV cache) on a Backend; new architectures go here.
//
// ModelRunner: owns a backend, the model's weights on it and the paged KV cache, and runs
// StepPlans through the Llama forward pass (model/llama_model.*). Not thread-safe: the
// engine thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/step.h"
#include "weights/loaded_model.h"

namespace flashserve {

class NodeGroup;

struct ModelRunnerOptions {
  std::string backend = "cpu";   // "cpu" | "cuda" | "auto"
  int block_size = 16;           // tokens per KV block
  int64_t kv_cache_tokens = 0;   // KV capacity in tokens; 0 = derive from kv_memory_fraction
  double kv_memory_fraction = 0.9;  // of free device memory (cuda) after weights; cpu: see impl
  int threads = 0;               // CPU backend worker threads; 0 = hardware concurrency
  // CUDA: decode steps of up to this many sequences replay recorded CUDA graphs (padded to a
  // bucket); 0 = every step runs eagerly (--enforce-eager). Ignored on the CPU.
  int graph_max_batch = 256;
  // Tensor parallelism (docs/TENSOR_PARALLEL.md): the model split over this many ranks, GPUs
  // 0..N-1 joined by NCCL (cuda) or CPU backends joined by the thread stand-in (cpu), each with
  // threads / N workers; 1 = one backend, no splitting.
  int tensor_parallel_size = 1;
  // Several hosts (docs/DEPLOY.md): this process's tensor_parallel_size ranks are those of its
  // node in a group of nnodes x tensor_parallel_size ranks, made by NodeGroup::join and started
  // (parallel/node_group.h). On node 0 the runner serves as usual and sends each step's plan to
  // the other nodes, which run run_tensor_parallel_worker (model/tensor_parallel_runner.h).
  // Null: this process alone.
  NodeGroup* node_group = nullptr;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Uploads `model`'s weights to the chosen backend and allocates the KV cache.
  static std::unique_ptr<ModelRunner> create(const LoadedModel& model,
                                             const ModelRunnerOptions& options);

  virtual const ModelConfig& config() const = 0;
  virtual std::string backend_name() const = 0;
  virtual int block_size() const = 0;
  virtual int num_kv_blocks() const = 0;
  virtual uint64_t graphs_recorded() const { return 0; }  // decode graphs recorded so far

  // Runs one step: lays the plan out (filling its arrays), writes the chunks' K/V into their
  // blocks, then appends to `logits` one row of vocab_size floats per requested position, chunk
  // by chunk in order (kLast: 1 row, kAll: num_tokens rows, kNone: none), except for chunks
  // whose token is drawn here (sample_path kArgmax or kDevice): for each of those, in order, it
  // appends the token to `sampled_ids` (-1 when the row holds a NaN); and for kHidden chunks, in
  // order, it appends their last position's final-norm hidden state (hidden_size floats) to
  // `hidden`. Throws flashserve::Error on invalid input or backend faults.
  virtual void step(StepPlan& plan, std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
                    std::vector<float>* hidden) = 0;
  // step() in two halves, so that the caller can work while the forward runs (the engine
  // computes the grammar masks of constrained rows there): launch() lays the plan out and
  // starts the forward (asynchronous where the backend is), finish() waits and delivers what
  // step() delivers. Between the two the caller may change only the chunks' sample.allowed;
  // `plan` must live until finish(). By default launch() remembers the plan and finish() runs
  // the whole step.
  virtual void launch(StepPlan& plan) { launched_ = &plan; }
  virtual void finish(std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
                      std::vector<float>* hidden) {
    step(*launched_, logits, sampled_ids, hidden);
  }
  // Steps without kHidden chunks.
  void step(StepPlan& plan, std::vector<float>* logits, std::vector<int32_t>* sampled_ids) {
    step(plan, logits, sampled_ids, nullptr);
  }
  void step(StepPlan& plan, std::vector<float>* logits) { step(plan, logits, nullptr, nullptr); }
  void step(StepPlan&& plan, std::vector<float>* logits) { step(plan, logits, nullptr, nullptr); }

 protected:
  StepPlan* launched_ = nullptr;  // launch()'s plan, until finish()
};

}  // namespace flashserve
