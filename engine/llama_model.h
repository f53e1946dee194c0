// The Llama forward pass (embedding, RMSNorm, RoPE incl. llama3 scaling, grouped-query paged
// attention, SwiGLU MLP, tied or untied head), written once against Backend ops so every
// backend shares it. Weights are uploaded once at construction; activations live in a
// workspace that grows to the largest step seen. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_cache.h"
#include "weights/model.h"

namespace flashserve {

// One step's tokens and their places, as host arrays (ModelRunner builds it from a StepBatch).
struct StepLayout {
  int num_seqs = 0;
  int max_q_len = 0;
  int max_kv_len = 0;
  int max_blocks_per_seq = 0;
  std::vector<int32_t> tokens;        // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens]
  std::vector<int32_t> slot_mapping;  // [num_tokens]
  std::vector<int32_t> cu_q_lens;     // [num_seqs + 1]
  std::vector<int32_t> kv_lens;       // [num_seqs]
  std::vector<int32_t> block_table;   // [num_seqs, max_blocks_per_seq], padded with -1
  std::vector<int32_t> logit_rows;    // [num_logit_rows] token rows whose logits are wanted
};

// RoPE inverse frequencies theta^(-2i/head_dim), adjusted by llama3 rope_scaling if set.
std::vector<float> rope_inv_freq(const ModelConfig& config);  // [head_dim / 2]

class LlamaModel {
 public:
  LlamaModel(Backend& backend, const LoadedModel& model);
  const ModelConfig& config() const { return config_; }
  // Runs `step` (its K/V are written into `cache`) and copies the wanted logits to the host.
  void forward(const StepLayout& step, KvCache& cache,
               float* logits);  // [num_logit_rows, vocab_size] host memory

 private:
  struct Layer {
    Buffer input_norm, wq, wk, wv, wo, post_norm, w_gate, w_up, w_down;
  };
  // A view of `shape` over `buf`, regrown (contents lost) when it is too small.
  Tensor scratch(Buffer& buf, DType dtype, std::initializer_list<int64_t> shape);

  Backend& backend_;
  ModelConfig config_;
  Buffer embed_, final_norm_, lm_head_, inv_freq_;  // lm_head_ empty when tied
  std::vector<Layer> layers_;
  struct Workspace {
    Buffer tokens, positions, slots, cu_q_lens, kv_lens, block_table, logit_rows;
    Buffer x, h, q, k, v, attn, gate, up, sel, logits;
  } ws_;
};

}  // namespace flashserve
