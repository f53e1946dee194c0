// ModelRunner over a Backend: sizes and owns the KV cache, lays each StepPlan out (model/step.h),
// runs LlamaModel::forward and returns each logit row or its drawn token as the plan asks.
#include "model/model_runner.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "backends/backend.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"

namespace flashserve {
namespace {

// The cascade configuration a runner uses: the options', else off unless FLASHSERVE_CASCADE=1.
CascadeConfig cascade_config(const ModelRunnerOptions& o) {
  if (o.cascade) return *o.cascade;
  CascadeConfig c;
  if (const char* v = std::getenv("FLASHSERVE_CASCADE")) {
    const std::string_view s(v);
    FS_CHECK(s == "0" || s == "1", "FLASHSERVE_CASCADE must be 0 or 1, got '", s, "'");
    c.enabled = s == "1";
  }
  return c;
}

class BackendModelRunner final : public ModelRunner {
 public:
  BackendModelRunner(std::unique_ptr<Backend> backend, const LoadedModel& model,
                     const ModelRunnerOptions& o)
      : backend_(std::move(backend)), model_(*backend_, model) {
    const ModelConfig& c = model_.config();
    FS_CHECK(o.block_size > 0, "block_size must be > 0, got ", o.block_size);
    KvCacheConfig kv;
    kv.num_layers = c.num_layers;
    kv.block_size = o.block_size;
    kv.num_kv_heads = c.num_kv_heads;
    kv.head_dim = c.head_dim;
    int64_t tokens = o.kv_cache_tokens;
    if (tokens <= 0) {
      // GPU: the fraction of the memory left after weights and the backend's reserve. CPU:
      // room for 8 full-length sequences, capped by the backend's memory budget.
      FS_CHECK(o.kv_memory_fraction > 0 && o.kv_memory_fraction <= 1, "kv_memory_fraction ",
               o.kv_memory_fraction, " must be in (0, 1]");
      const size_t per_token = kv.bytes_per_token(backend_->compute_dtype());
      const double budget = double(backend_->memory_available()) * o.kv_memory_fraction;
      const int64_t cap = int64_t(budget / double(per_token));
      const int64_t max_len = c.max_position_embeddings > 0 ? c.max_position_embeddings : 2048;
      tokens = backend_->device() == Device::kCuda ? cap : std::min<int64_t>(max_len * 8, cap);
      FS_CHECK(tokens >= o.block_size, "no memory left for even one KV block (", per_token,
               " bytes per token)");
    }
    const int64_t blocks = (tokens + o.block_size - 1) / o.block_size;
    FS_CHECK(blocks <= (int64_t(1) << 31) / o.block_size, "KV cache of ", tokens,
             " tokens is too large");
    kv.num_blocks = int(blocks);
    cache_ = std::make_unique<KvCache>(*backend_, kv);
    FS_CHECK(o.graph_max_batch >= 0, "graph_max_batch must be >= 0, got ", o.graph_max_batch);
    if (backend_->device() == Device::kCuda) model_.set_graph_max_batch(o.graph_max_batch);
    model_.set_cascade(cascade_config(o));
  }

  const ModelConfig& config() const override { return model_.config(); }
  std::string backend_name() const override { return backend_->name(); }
  int block_size() const override { return cache_->config().block_size; }
  int num_kv_blocks() const override { return cache_->config().num_blocks; }
  uint64_t graphs_recorded() const override { return model_.graphs_recorded(); }
  uint64_t cascade_steps() const override { return model_.cascade_steps(); }

  void step(StepPlan& plan, std::vector<float>* logits,
            std::vector<int32_t>* sampled_ids) override {
    FS_CHECK(logits != nullptr, "step: logits must not be null");
    if (plan.chunks.empty()) return;
    plan.lay_out(block_size(), num_kv_blocks(), config().vocab_size);
    const size_t vocab = size_t(config().vocab_size), rows = plan.logit_rows.size();
    auto path = [&](size_t r) { return plan.chunks[size_t(plan.row_chunk[r])].sample_path; };
    size_t sampled = 0, drawn = 0;  // rows whose token comes back; of those, not a plain argmax
    for (size_t r = 0; r < rows; ++r)
      if (path(r) != SamplePath::kHost) ++sampled, drawn += path(r) == SamplePath::kDevice;
    FS_CHECK(sampled == 0 || sampled_ids != nullptr, "step: sampled chunks need sampled_ids");
    if (sampled == 0) {  // every row goes back whole, straight into the caller's vector
      const size_t old = logits->size();
      logits->resize(old + rows * vocab);
      try {
        model_.forward(plan, *cache_, logits->data() + old, nullptr);
      } catch (...) {
        logits->resize(old);
        throw;
      }
      return;
    }
    // Sampled rows come back as tokens: kArgmax ones as the argmax the forward computes, kDevice
    // ones drawn by the backend's sampler; the rest (if any) as whole rows.
    row_ids_.assign(rows, -1);
    row_logits_.resize(sampled < rows ? rows * vocab : 0);
    model_.forward(plan, *cache_, sampled < rows ? row_logits_.data() : nullptr,
                   drawn < sampled ? row_ids_.data() : nullptr);
    if (drawn > 0) {
      draw_rows_.clear();
      draw_requests_.clear();
      for (size_t r = 0; r < rows; ++r)
        if (path(r) == SamplePath::kDevice) {
          draw_rows_.push_back(int64_t(r));
          draw_requests_.push_back(plan.chunks[size_t(plan.row_chunk[r])].sample);
        }
      draw_ids_.resize(drawn);
      backend_->sample_rows(draw_ids_.data(), model_.logits(), draw_rows_, draw_requests_);
      for (size_t i = 0; i < drawn; ++i) row_ids_[size_t(draw_rows_[i])] = draw_ids_[i];
    }
    for (size_t r = 0; r < rows; ++r) {
      if (path(r) != SamplePath::kHost) {
        sampled_ids->push_back(row_ids_[r]);
      } else {
        logits->insert(logits->end(), row_logits_.begin() + ptrdiff_t(r * vocab),
                       row_logits_.begin() + ptrdiff_t((r + 1) * vocab));
      }
    }
  }

 private:
  std::unique_ptr<Backend> backend_;
  LlamaModel model_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> row_ids_;    // [logit rows] tokens of the sampled rows
  std::vector<float> row_logits_;   // [logit rows, vocab] whole rows, for a mixed step
  std::vector<int64_t> draw_rows_;  // rows for Backend::sample_rows, and their requests / ids
  std::vector<SampleRequest> draw_requests_;
  std::vector<int32_t> draw_ids_;
};

}  // namespace

std::unique_ptr<ModelRunner> ModelRunner::create(const LoadedModel& model,
                                                 const ModelRunnerOptions& options) {
  std::unique_ptr<Backend> backend;
  if (options.backend == "cuda" || (options.backend == "auto" && cuda_backend_available())) {
    backend = make_cuda_backend(0);
  } else if (options.backend == "cpu" || options.backend == "auto") {
    backend = make_cpu_backend(options.threads);
  } else {
    FS_THROW("unknown backend '", options.backend, "' (cpu, cuda or auto)");
  }
  return std::make_unique<BackendModelRunner>(std::move(backend), model, options);
}

}  // namespace flashserve
