// ForwardRunner::step (which rows come back whole, which as drawn tokens, which as hidden
// states) and the KV cache's size, shared by the single-backend and the tensor-parallel runners.
#include "model/forward_runner.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve {

void ForwardRunner::step(StepPlan& plan, std::vector<float>* logits,
                         std::vector<int32_t>* sampled_ids, std::vector<float>* hidden) {
  launch(plan);
  finish(logits, sampled_ids, hidden);
}

void ForwardRunner::launch(StepPlan& plan) {
  launched_ = &plan;
  if (plan.chunks.empty()) return;
  plan.lay_out(block_size(), num_kv_blocks(), config().vocab_size);
  sampled_ = drawn_ = 0;
  for (int32_t c : plan.row_chunk) {
    const SamplePath path = plan.chunks[size_t(c)].sample_path;
    if (path != SamplePath::kHost) ++sampled_, drawn_ += path == SamplePath::kDevice;
  }  // a kHidden chunk has no sample path (lay_out refuses one)
  start_forward(plan, drawn_ < sampled_);
}

void ForwardRunner::finish(std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
                           std::vector<float>* hidden) {
  FS_CHECK(logits != nullptr, "step: logits must not be null");
  FS_CHECK(launched_ != nullptr, "finish() without launch()");
  const StepPlan& plan = *launched_;
  launched_ = nullptr;
  if (plan.chunks.empty()) return;
  const size_t vocab = size_t(config().vocab_size), rows = plan.logit_rows.size();
  auto path = [&](size_t r) { return plan.chunks[size_t(plan.row_chunk[r])].sample_path; };
  const size_t pooled = size_t(plan.num_hidden_rows), width = size_t(config().hidden_size);
  auto kind = [&](size_t r) { return plan.chunks[size_t(plan.row_chunk[r])].logits; };
  FS_CHECK(sampled_ == 0 || sampled_ids != nullptr, "step: sampled chunks need sampled_ids");
  FS_CHECK(pooled == 0 || hidden != nullptr, "step: kHidden chunks need hidden");
  if (sampled_ == 0 && pooled == 0) {  // every row goes back whole, into the caller's vector
    const size_t old = logits->size();
    logits->resize(old + rows * vocab);
    try {
      collect_forward(plan, logits->data() + old, nullptr, nullptr);
    } catch (...) {
      logits->resize(old);
      throw;
    }
    return;
  }
  // Sampled rows come back as tokens: kArgmax ones as the argmax the forward computes, kDevice
  // ones drawn by the backend's sampler (with their grammar masks); kHidden rows as hidden
  // states; the rest as whole rows.
  const bool whole = sampled_ + pooled < rows;
  row_ids_.assign(rows, -1);
  row_logits_.resize(whole ? rows * vocab : 0);
  row_hidden_.resize(pooled > 0 ? rows * width : 0);
  collect_forward(plan, whole ? row_logits_.data() : nullptr,
                  drawn_ < sampled_ ? row_ids_.data() : nullptr,
                  pooled > 0 ? row_hidden_.data() : nullptr);
  if (drawn_ > 0) {
    draw_rows_.clear();
    draw_requests_.clear();
    for (size_t r = 0; r < rows; ++r)
      if (path(r) == SamplePath::kDevice) {
        draw_rows_.push_back(int64_t(r));
        draw_requests_.push_back(plan.chunks[size_t(plan.row_chunk[r])].sample);
      }
    draw_ids_.resize(drawn_);
    sample_rows(draw_ids_.data(), draw_rows_, draw_requests_);
    for (size_t i = 0; i < drawn_; ++i) row_ids_[size_t(draw_rows_[i])] = draw_ids_[i];
  }
  for (size_t r = 0; r < rows; ++r) {
    if (kind(r) == LogitsWanted::kHidden) {
      hidden->insert(hidden->end(), row_hidden_.begin() + ptrdiff_t(r * width),
                     row_hidden_.begin() + ptrdiff_t((r + 1) * width));
    } else if (path(r) != SamplePath::kHost) {
      sampled_ids->push_back(row_ids_[r]);
    } else {
      logits->insert(logits->end(), row_logits_.begin() + ptrdiff_t(r * vocab),
                     row_logits_.begin() + ptrdiff_t((r + 1) * vocab));
    }
  }
}

bool uses_cuda(const ModelRunnerOptions& o) {
  if (o.backend != "cuda" && o.backend != "cpu" && o.backend != "auto")
    FS_THROW("unknown backend '", o.backend, "' (cpu, cuda or auto)");
  return o.backend == "cuda" || (o.backend == "auto" && cuda_backend_available());
}

std::unique_ptr<Backend> make_backend(const ModelRunnerOptions& o, int device, int threads) {
  return uses_cuda(o) ? make_cuda_backend(device) : make_cpu_backend(threads);
}

KvCacheConfig kv_cache_config(const Backend& backend, const ModelConfig& c, int num_kv_heads,
                              const ModelRunnerOptions& o) {
  FS_CHECK(o.block_size > 0, "block_size must be > 0, got ", o.block_size);
  KvCacheConfig kv;
  kv.num_layers = c.num_layers;
  kv.block_size = o.block_size;
  kv.num_kv_heads = num_kv_heads;
  kv.head_dim = c.head_dim;
  int64_t tokens = o.kv_cache_tokens;
  if (tokens <= 0) {
    // GPU: the fraction of the memory left after weights and the backend's reserve. CPU:
    // room for 8 full-length sequences, capped by the backend's memory budget.
    FS_CHECK(o.kv_memory_fraction > 0 && o.kv_memory_fraction <= 1, "kv_memory_fraction ",
             o.kv_memory_fraction, " must be in (0, 1]");
    const size_t per_token = kv.bytes_per_token(backend.compute_dtype());
    const double budget = double(backend.memory_available()) * o.kv_memory_fraction;
    const int64_t cap = int64_t(budget / double(per_token));
    const int64_t max_len = c.max_model_len > 0 ? c.max_model_len : 2048;
    tokens = backend.device() == Device::kCuda ? cap : std::min<int64_t>(max_len * 8, cap);
    FS_CHECK(tokens >= o.block_size, "no memory left for even one KV block (", per_token,
             " bytes per token)");
  }
  const int64_t blocks = (tokens + o.block_size - 1) / o.block_size;
  FS_CHECK(blocks <= (int64_t(1) << 31) / o.block_size, "KV cache of ", tokens,
           " tokens is too large");
  kv.num_blocks = int(blocks);
  return kv;
}

}  // namespace flashserve
