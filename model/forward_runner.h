// ForwardRunner: the step logic every ModelRunner shares (model/model_runner.h's contract for
// step()): lay the plan out, run the forward once, hand back whole logit rows, the tokens drawn
// where the logits are (argmax, or the backend's sampler) or kHidden chunks' hidden states. A
// runner supplies the forward and the sampler: one backend (model_runner.cpp) or a
// tensor-parallel group (tensor_parallel_runner.cpp).
// Also the KV cache's size, one rule for both. Internal to model/.
#pragma once

#include <span>
#include <vector>

#include "backends/backend.h"
#include "model/kv_cache.h"
#include "model/model_runner.h"

namespace flashserve {

class ForwardRunner : public ModelRunner {
 public:
  void step(StepPlan& plan, std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
            std::vector<float>* hidden) final;
  void launch(StepPlan& plan) final;
  void finish(std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
              std::vector<float>* hidden) final;

 protected:
  // Runs the laid-out plan and copies the rows' logits, their argmax and/or their final-norm
  // hidden states to the host (LlamaModel::forward); any pointer may be null.
  virtual void forward(const StepPlan& plan,
                       float* logits,        // [num_logit_rows, vocab_size] host, or null
                       int32_t* argmax,      // [num_logit_rows] host, or null
                       float* hidden) = 0;   // [num_logit_rows, hidden_size] host, or null
  // forward() in two halves: start_forward() queues the work (argmax: also the rows' argmax),
  // collect_forward() waits and copies. By default the first does nothing and the second runs
  // forward() whole.
  virtual void start_forward(const StepPlan& plan, bool argmax) {}
  virtual void collect_forward(const StepPlan& plan, float* logits, int32_t* argmax,
                               float* hidden) {
    forward(plan, logits, argmax, hidden);
  }
  // Backend::sample_rows over the last forward's logits.
  virtual void sample_rows(int32_t* ids,                                  // [n] host
                           std::span<const int64_t> rows,                 // [n]
                           std::span<const SampleRequest> requests) = 0;  // [n]

 private:
  size_t sampled_ = 0, drawn_ = 0;  // launch()'s rows whose token comes back; of those, drawn
  std::vector<int32_t> row_ids_;    // [logit rows] tokens of the sampled rows
  std::vector<float> row_logits_;   // [logit rows, vocab] whole rows, for a mixed step
  std::vector<float> row_hidden_;   // [logit rows, hidden] hidden states, with kHidden rows
  std::vector<int64_t> draw_rows_;  // rows for sample_rows, and their requests / ids
  std::vector<SampleRequest> draw_requests_;
  std::vector<int32_t> draw_ids_;
};

// The backend options.backend names: "cuda" (GPU `device`), "cpu" (`threads` workers, 0 = one
// per core) or "auto" (cuda when a GPU is present, else cpu); uses_cuda() says which it is.
bool uses_cuda(const ModelRunnerOptions& o);
std::unique_ptr<Backend> make_backend(const ModelRunnerOptions& o, int device, int threads);

// The KV cache of one backend for `num_kv_heads` heads (a tensor-parallel rank's), sized by
// options.kv_cache_tokens, else by the backend's free memory (GPU: kv_memory_fraction of it; CPU:
// room for 8 full-length sequences within the backend's budget). num_blocks is in blocks.
KvCacheConfig kv_cache_config(const Backend& backend, const ModelConfig& c, int num_kv_heads,
                              const ModelRunnerOptions& o);

}  // namespace flashserve
