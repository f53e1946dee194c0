// ModelRunner over one Backend: owns the KV cache, runs LlamaModel::forward for each StepPlan
// (model/forward_runner.h: the step logic, shared with the tensor-parallel runner).
#include "model/model_runner.h"

#include "core/error.h"
#include "backends/backend.h"
#include "model/forward_runner.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/tensor_parallel_runner.h"

namespace flashserve {
namespace {

class BackendModelRunner final : public ForwardRunner {
 public:
  BackendModelRunner(std::unique_ptr<Backend> backend, const LoadedModel& model,
                     const ModelRunnerOptions& o)
      : backend_(std::move(backend)), model_(*backend_, model) {
    const ModelConfig& c = model_.config();
    cache_ = std::make_unique<KvCache>(*backend_, kv_cache_config(*backend_, c, c.num_kv_heads, o));
    FS_CHECK(o.graph_max_batch >= 0, "graph_max_batch must be >= 0, got ", o.graph_max_batch);
    if (backend_->device() == Device::kCuda) model_.set_graph_max_batch(o.graph_max_batch);
  }

  const ModelConfig& config() const override { return model_.config(); }
  std::string backend_name() const override { return backend_->name(); }
  int block_size() const override { return cache_->config().block_size; }
  int num_kv_blocks() const override { return cache_->config().num_blocks; }
  uint64_t graphs_recorded() const override { return model_.graphs_recorded(); }

 private:
  void forward(const StepPlan& plan, float* logits, int32_t* argmax, float* hidden) override {
    model_.forward(plan, *cache_, logits, argmax, hidden);
  }
  void start_forward(const StepPlan& plan, bool argmax) override {
    model_.launch(plan, *cache_, argmax);
  }
  void collect_forward(const StepPlan&, float* logits, int32_t* argmax, float* hidden) override {
    model_.collect(logits, argmax, hidden);
  }
  void sample_rows(int32_t* ids, std::span<const int64_t> rows,
                   std::span<const SampleRequest> requests) override {
    backend_->sample_rows(ids, model_.logits(), rows, requests);
  }

  std::unique_ptr<Backend> backend_;
  LlamaModel model_;
  std::unique_ptr<KvCache> cache_;
};

}  // namespace

std::unique_ptr<ModelRunner> ModelRunner::create(const LoadedModel& model,
                                                 const ModelRunnerOptions& options) {
  if (options.tensor_parallel_size != 1 || options.node_group)
    return make_tensor_parallel_runner(model, options);
  return std::make_unique<BackendModelRunner>(make_backend(options, 0, options.threads), model,
                                              options);
}

}  // namespace flashserve
