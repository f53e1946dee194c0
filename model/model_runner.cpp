// ModelRunner over a Backend: sizes and owns the KV cache, validates each StepBatch and turns it
// into a StepLayout (positions, slot mapping, padded block table, wanted logit rows), then runs
// LlamaModel::forward.
#include "model/model_runner.h"

#include <algorithm>

#include "core/error.h"
#include "backends/backend.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"

namespace flashserve {
namespace {

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
  }

  const ModelConfig& config() const override { return model_.config(); }
  std::string backend_name() const override { return backend_->name(); }
  int block_size() const override { return cache_->config().block_size; }
  int num_kv_blocks() const override { return cache_->config().num_blocks; }
  uint64_t graphs_recorded() const override { return model_.graphs_recorded(); }

  void step(const StepBatch& batch, std::vector<float>* logits,
            std::vector<int32_t>* sampled_ids) override {
    FS_CHECK(logits != nullptr, "step: logits must not be null");
    if (batch.chunks.empty()) return;
    build_layout(batch);
    const size_t vocab = size_t(config().vocab_size), rows = layout_.logit_rows.size();
    size_t sampled = 0, drawn = 0;  // rows with a sample; of those, not a plain argmax
    for (const SampleRequest* r : row_sample_)
      if (r) ++sampled, drawn += !argmax_is_enough(*r->params);
    FS_CHECK(sampled == 0 || sampled_ids != nullptr, "step: sampled chunks need sampled_ids");
    if (sampled == 0) {  // every row goes back whole, straight into the caller's vector
      const size_t old = logits->size();
      logits->resize(old + rows * vocab);
      try {
        model_.forward(layout_, *cache_, logits->data() + old, nullptr);
      } catch (...) {
        logits->resize(old);
        throw;
      }
      return;
    }
    // Sampled rows come back as tokens: plain greedy ones as the argmax the forward computes,
    // the others drawn by the backend's sampler; the rest (if any) as whole rows.
    row_ids_.assign(rows, -1);
    row_logits_.resize(sampled < rows ? rows * vocab : 0);
    model_.forward(layout_, *cache_, sampled < rows ? row_logits_.data() : nullptr,
                   drawn < sampled ? row_ids_.data() : nullptr);
    if (drawn > 0) {
      draw_rows_.clear();
      draw_requests_.clear();
      for (size_t r = 0; r < rows; ++r)
        if (row_sample_[r] && !argmax_is_enough(*row_sample_[r]->params)) {
          draw_rows_.push_back(int64_t(r));
          draw_requests_.push_back(*row_sample_[r]);
        }
      draw_ids_.resize(drawn);
      backend_->sample_rows(draw_ids_.data(), model_.logits(), draw_rows_, draw_requests_);
      for (size_t i = 0; i < drawn; ++i) row_ids_[size_t(draw_rows_[i])] = draw_ids_[i];
    }
    for (size_t r = 0; r < rows; ++r) {
      if (row_sample_[r]) {
        sampled_ids->push_back(row_ids_[r]);
      } else {
        logits->insert(logits->end(), row_logits_.begin() + r * vocab,
                       row_logits_.begin() + (r + 1) * vocab);
      }
    }
  }

 private:
  void build_layout(const StepBatch& batch) {
    const int bs = block_size(), vocab = config().vocab_size;
    StepLayout& s = layout_;
    s.num_seqs = int(batch.chunks.size());
    s.max_q_len = s.max_kv_len = s.max_blocks_per_seq = 0;
    s.tokens.clear();
    s.positions.clear();
    s.slot_mapping.clear();
    s.cu_q_lens.assign(1, 0);
    s.kv_lens.clear();
    s.logit_rows.clear();
    row_sample_.clear();
    for (size_t b = 0; b < batch.chunks.size(); ++b) {
      const SeqChunk& ch = batch.chunks[b];
      FS_CHECK(ch.num_tokens > 0 && ch.tokens != nullptr, "chunk ", b, " has no tokens");
      FS_CHECK(ch.num_cached >= 0, "chunk ", b, ": num_cached ", ch.num_cached);
      FS_CHECK(ch.block_table != nullptr, "chunk ", b, " has no block table");
      const int kv_len = ch.num_cached + ch.num_tokens;
      const int needed = (kv_len + bs - 1) / bs;
      FS_CHECK(int(ch.block_table->size()) >= needed, "chunk ", b, ": ", kv_len, " tokens need ",
               needed, " blocks, table has ", ch.block_table->size());
      for (int i = 0; i < needed; ++i) {
        const int32_t blk = (*ch.block_table)[i];
        FS_CHECK(blk >= 0 && blk < num_kv_blocks(), "chunk ", b, ": block id ", blk,
                 " outside the cache's ", num_kv_blocks(), " blocks");
      }
      const int row0 = int(s.tokens.size());
      for (int i = 0; i < ch.num_tokens; ++i) {
        const int32_t tok = ch.tokens[i];
        FS_CHECK(tok >= 0 && tok < vocab, "chunk ", b, ": token id ", tok, " outside vocab ",
                 vocab);
        const int pos = ch.num_cached + i;
        s.tokens.push_back(tok);
        s.positions.push_back(pos);
        s.slot_mapping.push_back((*ch.block_table)[pos / bs] * bs + pos % bs);
      }
      FS_CHECK(!ch.sample || ch.logits == LogitsWanted::kLast, "chunk ", b,
               ": sampling needs LogitsWanted::kLast");
      FS_CHECK(!ch.sample || ch.sample->params, "chunk ", b, ": sampling without parameters");
      if (ch.logits == LogitsWanted::kLast) {
        s.logit_rows.push_back(row0 + ch.num_tokens - 1);
        row_sample_.push_back(ch.sample ? &*ch.sample : nullptr);
      }
      if (ch.logits == LogitsWanted::kAll)
        for (int i = 0; i < ch.num_tokens; ++i) {
          s.logit_rows.push_back(row0 + i);
          row_sample_.push_back(nullptr);
        }
      s.cu_q_lens.push_back(int32_t(s.tokens.size()));
      s.kv_lens.push_back(kv_len);
      s.max_q_len = std::max(s.max_q_len, ch.num_tokens);
      s.max_kv_len = std::max(s.max_kv_len, kv_len);
      s.max_blocks_per_seq = std::max(s.max_blocks_per_seq, needed);
    }
    s.block_table.assign(size_t(s.num_seqs) * s.max_blocks_per_seq, -1);
    for (int b = 0; b < s.num_seqs; ++b) {
      const std::vector<int32_t>& t = *batch.chunks[b].block_table;
      const int needed = (s.kv_lens[b] + bs - 1) / bs;
      std::copy(t.begin(), t.begin() + needed,
                s.block_table.begin() + size_t(b) * s.max_blocks_per_seq);
    }
  }

  std::unique_ptr<Backend> backend_;
  LlamaModel model_;
  std::unique_ptr<KvCache> cache_;
  StepLayout layout_;  // reused across steps to keep its capacity
  std::vector<const SampleRequest*> row_sample_;  // [logit rows] the chunk's sample, or null
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
