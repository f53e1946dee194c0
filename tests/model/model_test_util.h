// Helpers for the model tests: temporary folders (tests/common/temp_dir.h), a small model shape, a
// block pool that hands out shuffled block ids (so sequences interleave in the cache), one
// sequence's KV bookkeeping, a prompt's logits, a greedy continuation, and comparisons of logit
// arrays.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/model_runner.h"
#include "tests/common/temp_dir.h"
#include "weights/attention_config.h"
#include "weights/hf_config.h"
#include "weights/loaded_model.h"
#include "weights/random_model.h"
#include "weights/fp8_weights.h"
#include "weights/llama_tensors.h"
#include "weights/safetensors_writer.h"

namespace flashserve::test {

namespace fs = std::filesystem;

inline ModelConfig small_config(int hidden, int q_heads, int kv_heads, int head_dim, bool tied) {
  ModelConfig c;
  c.hidden_size = hidden;
  c.intermediate_size = hidden * 3 / 2 + 8;
  c.num_layers = 2;
  c.num_q_heads = q_heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = 300;
  c.max_model_len = 256;
  c.rms_norm_eps = 1e-5f;
  c.tie_word_embeddings = tied;
  return c;
}

// A small random model of a Llama-family architecture, as the parameterised model tests list
// them: a name (the test's suffix), the shape small_config takes, the weight files' dtype, and
// settings beyond the architecture's (windows, soft-caps, ...).
struct RandomModelShape {
  const char* name;
  int hidden, q_heads, kv_heads, head_dim;
  bool tied;
  DType file_dtype;
  const char* arch = "LlamaForCausalLM";
  void (*variant)(ModelConfig&) = nullptr;
  ModelConfig config() const {
    ModelConfig c = small_config(hidden, q_heads, kv_heads, head_dim, tied);
    set_architecture(c, arch);
    if (variant) variant(c);
    return c;
  }
};

// LongRoPE factor lists for `original` positions (every pair a different factor).
inline void longrope_factors(ModelConfig& c, int original) {
  c.rope_scaling.type = "longrope";
  c.rope_scaling.original_max_position_embeddings = original;
  c.rope_scaling.factor = float(c.max_model_len) / float(original);
  const int pairs = int(c.head_dim * double(c.partial_rotary_factor)) / 2;
  for (int i = 0; i < pairs; ++i) {
    c.rope_scaling.short_factor.push_back(1.f + 0.05f * float(i));
    c.rope_scaling.long_factor.push_back(1.f + 0.5f * float(i));
  }
}
// Phi3 with partial rotary and the long factors (the model tests' prompts outgrow 16 positions).
inline void phi3_long(ModelConfig& c) {
  c.partial_rotary_factor = 0.75f;
  longrope_factors(c, 16);
}
// The same at the CUDA model tests' 1024-position context (the factor is context / original).
inline void phi3_long_1024(ModelConfig& c) {
  c.max_model_len = 1024;
  phi3_long(c);
}
inline void granite(ModelConfig& c) {
  c.embedding_multiplier = 12.f;
  c.residual_multiplier = 0.22f;
  c.attention_multiplier = 0.3f;
  c.logits_scaling = 8.f;
}
inline void smollm3(ModelConfig& c) { c.rope_layers = {1, 0}; }

// Windows of 8 keys, shorter than the model tests' prompts (20 tokens and up) and decodes;
// soft-caps small enough to bend a random model's scores and logits (|s| ~ 1, logits up to ~8)
// but not so small that bf16 rounding of the capped values dominates the CUDA-vs-CPU error;
// a query_pre_attn_scalar other than head_dim.
inline void gemma2_windowed(ModelConfig& c) {  // even layers windowed
  set_sliding_layers(c, 8, 2);
  c.query_pre_attn_scalar = 128.f;
  c.attn_logit_softcapping = 2.f;
  c.final_logit_softcapping = 5.f;
}
// Layers 0, 1 local (RoPE base 100), layer 2 global (linear scaling: the global table's only).
inline void gemma3_windowed(ModelConfig& c) {
  c.num_layers = 3;
  c.rope_local_theta = 100.f;
  set_sliding_layers(c, 8, 3);
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.f;
  // Gemma 3's published scalar is head_dim; a smaller one with q/k norms makes scores so sharp
  // that bf16 q/k rounding alone moves the CUDA logits past the tolerance.
  c.query_pre_attn_scalar = 256.f;
}
inline void every_layer_windowed(ModelConfig& c) { set_sliding_layers(c, 8, 0); }

// The Llama-family shapes the CUDA model tests run (test_cuda_backend against the CPU, the
// tensor-parallel tests against one GPU): GQA and MHA, one KV head, head_dim 32 (the generic
// attention kernel), 64, 128 and 256 (Gemma's), tied and untied heads, f32/f16/bf16 weight
// files, Mistral (also with a sliding window), Qwen2's q/k/v biases, Qwen3's q/k norms, and
// Gemma 2 and 3 (sandwich norms, GeGLU, windows, soft-caps, local RoPE).
inline std::vector<RandomModelShape> cuda_model_shapes() {
  return {RandomModelShape{"d64_gqa_tied_bf16", 256, 4, 2, 64, true, DType::kBF16},
          RandomModelShape{"d64_mha_untied_f32", 256, 4, 4, 64, false, DType::kF32},
          RandomModelShape{"d128_gqa4_untied_bf16", 512, 4, 1, 128, false, DType::kBF16},
          RandomModelShape{"d128_gqa_tied_f16", 512, 8, 2, 128, true, DType::kF16},
          RandomModelShape{"d32_generic_untied_bf16", 128, 4, 2, 32, false, DType::kBF16},
          RandomModelShape{"mistral_d128_gqa_untied_bf16", 512, 4, 2, 128, false, DType::kBF16,
                           "MistralForCausalLM"},
          RandomModelShape{"qwen2_d64_gqa_tied_bf16", 256, 4, 2, 64, true, DType::kBF16,
                           "Qwen2ForCausalLM"},
          RandomModelShape{"qwen3_d128_gqa_tied_bf16", 256, 4, 2, 128, true, DType::kBF16,
                           "Qwen3ForCausalLM"},
          RandomModelShape{"mistral_window_d128_gqa_untied_bf16", 512, 4, 2, 128, false,
                           DType::kBF16, "MistralForCausalLM", every_layer_windowed},
          RandomModelShape{"gemma2_d256_gqa_tied_bf16", 256, 4, 2, 256, true, DType::kBF16,
                           "Gemma2ForCausalLM", gemma2_windowed},
          RandomModelShape{"gemma3_d256_gqa4_tied_bf16", 256, 4, 1, 256, true, DType::kBF16,
                           "Gemma3ForCausalLM", gemma3_windowed},
          RandomModelShape{"phi3_d64_gqa_untied_bf16", 256, 4, 2, 64, false, DType::kBF16,
                           "Phi3ForCausalLM", phi3_long_1024},
          RandomModelShape{"granite_d64_gqa_tied_bf16", 256, 4, 2, 64, true, DType::kBF16,
                           "GraniteForCausalLM", granite},
          RandomModelShape{"olmo2_d128_gqa_untied_bf16", 512, 4, 2, 128, false, DType::kBF16,
                           "Olmo2ForCausalLM"},
          RandomModelShape{"smollm3_d64_gqa_tied_bf16", 256, 4, 2, 64, true, DType::kBF16,
                           "SmolLM3ForCausalLM", smollm3}};
}

// Hands out block ids in a fixed shuffled order.
class BlockPool {
 public:
  BlockPool(int num_blocks, uint32_t seed) : ids_(num_blocks) {
    for (int i = 0; i < num_blocks; ++i) ids_[i] = i;
    std::shuffle(ids_.begin(), ids_.end(), std::mt19937(seed));
  }
  int32_t take() {
    EXPECT_LT(next_, ids_.size()) << "test block pool exhausted";
    return ids_.at(next_++);
  }

 private:
  std::vector<int32_t> ids_;
  size_t next_ = 0;
};

// One sequence's tokens and KV blocks; chunk() makes the StepChunk for its next n tokens.
struct TestSeq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  int num_cached = 0;
  StepChunk chunk(int n, int block_size, BlockPool& pool, LogitsWanted want) {
    while (int(blocks.size()) * block_size < num_cached + n) blocks.push_back(pool.take());
    StepChunk c;
    c.tokens = tokens.data() + num_cached;
    c.num_tokens = n;
    c.num_cached = num_cached;
    c.block_table = &blocks;
    c.logits = want;
    num_cached += n;
    return c;
  }
};

inline std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

// The 64 tokens the numpy reference generates greedily from stories260K after BOS + "Once upon
// a time" (tests/model/data/stories260K_greedy.txt, how it was made: test_stories260k_greedy.cpp).
inline std::vector<int32_t> stories260k_greedy_ids() {
  std::ifstream in(std::string(FS_SOURCE_DIR) + "/tests/model/data/stories260K_greedy.txt");
  std::vector<int32_t> ids;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    for (int32_t x; ls >> x;) ids.push_back(x);
  }
  return ids;
}

// Every position's logits [ids.size(), vocab] of one sequence prefilled whole on the CPU backend.
inline std::vector<float> prefill_logits(const LoadedModel& model, const std::vector<int32_t>& ids,
                                         ModelRunnerOptions o = {}) {
  auto runner = ModelRunner::create(model, o);
  BlockPool pool(runner->num_kv_blocks(), 11);
  TestSeq seq;
  seq.tokens = ids;
  StepPlan b;
  b.chunks.push_back(seq.chunk(int(ids.size()), runner->block_size(), pool, LogitsWanted::kAll));
  std::vector<float> logits;
  runner->step(b, &logits);
  return logits;
}

// The greedy continuation of `prompt` by n tokens (CPU backend): the prompt prefilled whole or
// token by token, then one decode step per token.
inline std::vector<int32_t> greedy_tokens(const LoadedModel& model, std::vector<int32_t> prompt,
                                          int n, int block_size = 16, int threads = 0,
                                          bool token_by_token = false) {
  ModelRunnerOptions o;
  o.block_size = block_size;
  o.threads = threads;
  auto runner = ModelRunner::create(model, o);
  BlockPool pool(runner->num_kv_blocks(), 3);
  TestSeq seq;
  seq.tokens = std::move(prompt);
  const int vocab = model.config().vocab_size;
  std::vector<int32_t> out;
  std::vector<float> logits;
  while (int(out.size()) < n) {
    StepPlan b;
    const int pending = int(seq.tokens.size()) - seq.num_cached;
    b.chunks.push_back(
        seq.chunk(token_by_token ? 1 : pending, block_size, pool, LogitsWanted::kLast));
    logits.clear();
    runner->step(b, &logits);
    if (seq.num_cached < int(seq.tokens.size())) continue;  // still in the prompt
    const int32_t next =
        int32_t(std::max_element(logits.end() - vocab, logits.end()) - (logits.end() - vocab));
    out.push_back(next);
    seq.tokens.push_back(next);
  }
  return out;
}

// Every position's logits of one sequence prefilled whole on 2 threads (TP: that many ranks).
inline std::vector<float> all_logits(const LoadedModel& model, const std::vector<int32_t>& ids,
                                     int tensor_parallel = 1) {
  ModelRunnerOptions o;
  o.threads = 2;
  o.tensor_parallel_size = tensor_parallel;
  return prefill_logits(model, ids, o);
}

// `model` written back as a plain f32 HF folder: every tensor's values as loaded (FP8 weights,
// and the int4 and block-FP8 ones dequantized at load, as their dequantized values).
inline std::string dequantized_copy(const LoadedModel& model, const std::string& name) {
  const std::string dir = fresh_dir(name);
  ModelConfig c = model.config();
  c.quant_method = "";
  std::vector<WriterTensor> tensors;
  for (const auto& [tensor, shape] : llama_tensor_shapes(c)) {
    WriterTensor& t = tensors.emplace_back();
    t.spec = TensorSpec{tensor, DType::kF32, shape};
    t.bytes = encode_values(weight_values(model.tensor(tensor)), DType::kF32);
  }
  write_safetensors(dir + "/model.safetensors", tensors);
  std::ofstream(dir + "/config.json") << hf_config_json(c);
  return dir;
}

// A quantized model's logits against its unquantized self's, teacher-forced: the mean over
// positions of |a - b|^2 / |b|^2, and how often the argmax agrees.
struct Quality {
  double nmse = 0, top1 = 0;
};
inline Quality logit_quality(const std::vector<float>& a, const std::vector<float>& b,
                             int vocab) {
  Quality q;
  const size_t rows = b.size() / size_t(vocab);
  for (size_t r = 0; r < rows; ++r) {
    const float* x = a.data() + r * vocab;
    const float* y = b.data() + r * vocab;
    double num = 0, den = 0;
    for (int i = 0; i < vocab; ++i) num += double(x[i] - y[i]) * (x[i] - y[i]), den += double(y[i]) * y[i];
    q.nmse += num / den / double(rows);
    q.top1 += (std::max_element(x, x + vocab) == x + (std::max_element(y, y + vocab) - y)) / double(rows);
  }
  return q;
}

// max |a - b| / max |b| over the arrays (a relative error that ignores near-zero entries).
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace flashserve::test
