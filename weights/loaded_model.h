// A loaded model: its configuration and named tensor views over memory-mapped weight files.
// Both HF directories (config.json + safetensors, single or sharded) and llama2.c checkpoints
// (.bin) load into this one shape, with tensors under their Hugging Face causal-LM names (a
// checkpoint of the bare backbone, names without "model.", is read under these names too):
//   model.embed_tokens.weight                     [vocab_size, hidden_size]
//   model.layers.{i}.input_layernorm.weight       [hidden_size]
//   model.layers.{i}.self_attn.q_proj.weight      [num_q_heads * head_dim, hidden_size]
//   model.layers.{i}.self_attn.k_proj.weight      [num_kv_heads * head_dim, hidden_size]
//   model.layers.{i}.self_attn.v_proj.weight      [num_kv_heads * head_dim, hidden_size]
//   model.layers.{i}.self_attn.o_proj.weight      [hidden_size, num_q_heads * head_dim]
//   model.layers.{i}.post_attention_layernorm.weight [hidden_size]
//   model.layers.{i}.mlp.gate_proj.weight         [intermediate_size, hidden_size]
//   model.layers.{i}.mlp.up_proj.weight           [intermediate_size, hidden_size]
//   model.layers.{i}.mlp.down_proj.weight         [hidden_size, intermediate_size]
//   model.norm.weight                             [hidden_size]
//   lm_head.weight                                [vocab_size, hidden_size]  (absent when tied)
// and, by family (ModelConfig's flags, set from the architecture in weights/hf_config.cpp):
//   model.layers.{i}.self_attn.{q,k,v}_proj.bias  [rows of that projection]  (qkv_bias: Qwen2)
//   model.layers.{i}.self_attn.{q,k}_norm.weight  [head_dim]                  (qk_norm: Qwen3)
//   model.layers.{i}.self_attn.{q,k}_norm.weight  [{q,kv} heads * head_dim]  (qk_norm_full: Olmo2)
//   model.layers.{i}.post_feedforward_layernorm.weight [hidden_size]  (post_norms: Olmo2, which
//     has no input_layernorm and norms the attention output with post_attention_layernorm)
//   model.layers.{i}.self_attn.qkv_proj.weight, mlp.gate_up_proj.weight  (fused_projections:
//     Phi3; the loader adds q/k/v_proj and gate/up_proj as row ranges of them)
//   model.layers.{i}.pre_feedforward_layernorm.weight, post_feedforward_layernorm.weight
//     [hidden_size]  (sandwich_norms: Gemma 2/3, whose post_attention_layernorm norms the
//     attention output and pre_feedforward_layernorm the MLP's input)
//   mixture-of-experts layers (ModelConfig::moe.sparse_layers) hold, instead of mlp.*_proj,
//   with E = num_experts, I = moe_intermediate_size, S = shared_expert_intermediate_size:
//     Qwen2-MoE, Qwen3-MoE: model.layers.{i}.mlp.gate.weight [E, hidden_size] (the router)
//       model.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight [I, hidden_size], down_proj [hidden_size, I]
//       Qwen2-MoE also model.layers.{i}.mlp.shared_expert.{gate,up}_proj.weight [S, hidden_size],
//       down_proj [hidden_size, S] and mlp.shared_expert_gate.weight [1, hidden_size]
//     Mixtral: model.layers.{i}.block_sparse_moe.gate.weight [E, hidden_size] (the router)
//       model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight (gate), w3 (up) [I, hidden_size],
//       w2 (down) [hidden_size, I]
//     gpt-oss (MXFP4, weights/mxfp4_weights.h): model.layers.{i}.mlp.router.weight [E, hidden_size]
//       and .bias [E]; model.layers.{i}.mlp.experts.gate_up_proj [E, 2I, hidden_size] (rows
//       interleaved: gate, up, gate, ...) and down_proj [E, hidden_size, I], whose views carry
//       TensorView::mxfp4 (the checkpoint's *_blocks and *_scales), and their biases
//       .gate_up_proj_bias [E, 2I], .down_proj_bias [E, hidden_size]
//   gpt-oss also has model.layers.{i}.self_attn.o_proj.bias [hidden_size] (o_bias) and
//     model.layers.{i}.self_attn.sinks [num_q_heads] (attention_sinks)
// RoPE convention: every loaded model uses the HF "rotate half" pairing (i, i + head_dim/2).
// llama2.c checkpoints rotate interleaved pairs (2i, 2i+1); their loader permutes the rows of
// q_proj and k_proj within each head so the same forward pass serves both (q.k is unchanged).
// Loading errors throw flashserve::Error naming the file and the problem.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "weights/quant_config.h"

namespace flashserve {

// config.json's rope_scaling (model/rope_tables.h turns it into inverse frequencies). type: "none"
// (plain RoPE), "llama3" (Llama 3.1/3.2), "linear", "dynamic" (NTK: plain RoPE within
// max_position_embeddings), "yarn" (Qwen 2.5/3 long context) or "longrope" (Phi-3.5, Phi-4).
struct RopeScaling {
  std::string type = "none";
  float factor = 1.f;
  float low_freq_factor = 1.f;   // llama3
  float high_freq_factor = 4.f;  // llama3
  int original_max_position_embeddings = 8192;
  float beta_fast = 32.f, beta_slow = 1.f;    // yarn: the ramp between kept and scaled dims
  float mscale = 0.f, mscale_all_dim = 0.f;   // yarn: 0 = not set
  bool truncate = true;                       // yarn: the ramp's ends rounded to whole dims
  float attention_factor = 0.f;  // yarn, longrope: multiplies cos and sin; 0 = derived
  std::vector<float> short_factor, long_factor;  // longrope: [rotary_dim / 2] each
};

// generation_config.json's sampling settings: a request that omits one of these gets the model's
// value instead of the API default (nullopt: the file does not set it).
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> repetition_penalty;
};

// A mixture-of-experts model's routing and expert sizes (ModelConfig::moe).
struct MoeConfig {
  int num_experts = 0;        // routed experts in each sparse layer; 0: no sparse layers
  int top_k = 0;              // num_experts_per_tok
  int intermediate = 0;       // each expert's intermediate size (moe_intermediate_size)
  bool renormalize = false;   // norm_topk_prob: the k weights divided by their sum (Mixtral: always)
  int shared_intermediate = 0;  // Qwen2-MoE's gated shared expert (0: none)
  // gpt-oss: the router and every expert projection add a bias, and the experts' activation is
  // the clamped SwiGLU on interleaved gate/up rows, g = min(gate, limit), u = clamp(up, +-limit),
  // (u + 1) * g * sigmoid(swiglu_alpha * g). swiglu_limit 0: plain SwiGLU, no biases.
  float swiglu_limit = 0.f;
  float swiglu_alpha = 1.702f;
  // Per layer: 1 = a sparse (MoE) layer, 0 = a dense MLP of intermediate_size (Qwen's
  // mlp_only_layers and decoder_sparse_step). Empty exactly when num_experts is 0.
  std::vector<int> sparse_layers;
  bool sparse(int layer) const {
    return layer >= 0 && size_t(layer) < sparse_layers.size() && sparse_layers[size_t(layer)];
  }
};

// The Llama family's members differ only in what these flags say (docs/ARCHITECTURE.md, "Model
// families"); the architecture name is kept for messages and for writing config.json back.
struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";  // config.json "architectures" (HF class name)
  bool qkv_bias = false;  // q/k/v projections add a bias (Qwen2)
  bool o_bias = false;    // o_proj adds a bias (gpt-oss's attention_bias)
  // A learned sink logit per q head joins each attention softmax's denominator (gpt-oss).
  bool attention_sinks = false;
  bool qk_norm = false;   // per-head RMSNorm of q and k (weight [head_dim]) before RoPE (Qwen3)
  bool qk_norm_full = false;  // RMSNorm over all of q and of k (weights [heads * head_dim]) (Olmo2)
  bool post_norms = false;  // blocks' outputs normed before the residual add, inputs not (Olmo2)
  bool fused_projections = false;  // checkpoint holds qkv_proj and gate_up_proj (Phi3)
  // Gemma 2/3: an RMSNorm before and after each block (sandwich_norms), every norm scaling by
  // (1 + weight) (norm_weight_plus_one), GeGLU with the tanh approximation of GELU instead of
  // SwiGLU (gelu_mlp), embeddings times sqrt(hidden_size) rounded to the compute dtype
  // (scale_embeddings; the tied head is not scaled).
  bool sandwich_norms = false;
  bool norm_weight_plus_one = false;
  bool gelu_mlp = false;
  bool scale_embeddings = false;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // config's head_dim when given, else hidden_size / num_q_heads
  int vocab_size = 0;
  int max_model_len = 0;  // prompt + generated tokens (config.json "max_position_embeddings")
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.f;
  RopeScaling rope_scaling;
  float partial_rotary_factor = 1.f;  // RoPE turns the first head_dim * this dims of a head (Phi3)
  // Per layer: 1 = RoPE, 0 = none (SmolLM3's NoPE), 2 = the local table (Gemma 3's sliding
  // layers: base rope_local_theta, no scaling). Empty = all 1.
  std::vector<int> rope_layers;
  float rope_local_theta = 0.f;  // Gemma 3's rope_local_base_freq (0: no local layers)
  // Sliding-window attention per layer: a query sees itself and the window - 1 keys before it;
  // 0 = full attention. Empty = every layer full.
  std::vector<int> layer_windows;
  // Gemma: softmax scale query_pre_attn_scalar^-0.5 (0: not set); scores and final logits
  // soft-capped, s -> cap * tanh(s / cap) (0: off).
  float query_pre_attn_scalar = 0.f;
  float attn_logit_softcapping = 0.f, final_logit_softcapping = 0.f;
  // Granite's scalings: embeddings times embedding_multiplier, each block's output times
  // residual_multiplier, softmax scale attention_multiplier (0: 1/sqrt(head_dim)), logits
  // divided by logits_scaling.
  float embedding_multiplier = 1.f, residual_multiplier = 1.f, attention_multiplier = 0.f;
  float logits_scaling = 1.f;
  bool tie_word_embeddings = false;
  int bos_token_id = 1;
  // Every id that ends a sequence: config.json's eos_token_id (an int or a list) and then
  // generation_config.json's. Where neither names one, LoadedModel::use_tokenizer_eos replaces it.
  std::vector<int> eos_token_ids = {2};
  bool eos_from_config = false;  // a config file (or the checkpoint format) fixed eos_token_ids
  GenerationDefaults generation;
  // Mixture of experts (docs/MODELS.md, "Mixture of experts"): the sparse layers' MLP is a
  // router (logits over num_experts), the top_k experts per token by softmax probability
  // (divided by their sum with norm_topk_prob), and the weighted sum of those experts' SwiGLU
  // MLPs of moe_intermediate_size; Qwen2-MoE adds a shared expert of
  // shared_expert_intermediate_size scaled by sigmoid(its gate). num_experts 0: a dense model.
  MoeConfig moe;
  // "" for plain f32/f16/bf16 weights; "mxfp4" when gpt-oss's experts are MXFP4 (the rest
  // plain); "fp8" when the layers' projections are FP8 E4M3
  // (config.json's quantization_config, or quantized at load: LoadOptions); "gptq", "awq" or
  // "compressed-tensors" for int4 checkpoints (docs/QUANTIZATION.md).
  std::string quant_method;
  QuantConfig quant;  // the whole quantization_config (weights/quant_config.h)
};

struct Int4Stored;  // weights/int4_weights.h
struct BlockFp8Weight;  // weights/block_fp8_weights.h
struct Mxfp4Weight;  // weights/mxfp4_weights.h

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into a mapped file (or a loader-owned buffer); null if packed
  // kF8E4M3 weights only (weights/fp8_weights.h): one fp32 scale per row, row r of the weight
  // being decode(q[r, :]) * row_scale[r]. A checkpoint's per-tensor scale is expanded to rows.
  const float* row_scale = nullptr;  // [shape[0]]
  // --quantize fp8 left to the backend (LoadOptions::fp8_in_backend): an f32/f16/bf16
  // projection that becomes FP8 E4M3 with one scale per row as a backend loads it, the codes and
  // scales being quantize_fp8_rows' bit for bit (weights/fp8_weights.h; the CUDA backend
  // quantizes on the GPU). Row cuts and stacks keep it; whatever needs the FP8 on the host
  // (rewritten rows, column cuts, values) asks fp8_view_on_host.
  bool to_fp8 = false;
  // Int4 checkpoints' projections (docs/QUANTIZATION.md): dtype kI4, no `data`, and this the
  // weight as the checkpoint packs it; each backend converts it when it loads it, and whoever
  // needs values asks weights/packed_views.h (which dequantizes to f32).
  std::shared_ptr<const Int4Stored> int4 = nullptr;
  // Block-wise FP8 checkpoints' projections: dtype kF32 (that of their values), no `data`, and
  // this the codes (still in the mapped file) and block scales; as with int4, each backend
  // converts it when it loads it and whoever needs values asks weights/packed_views.h.
  std::shared_ptr<const BlockFp8Weight> block_fp8 = nullptr;
  // gpt-oss's MXFP4 experts: dtype kF32 (that of their values), shape [E, rows, cols], no
  // `data`, and this the blocks and scales (still in the mapped file).
  std::shared_ptr<const Mxfp4Weight> mxfp4 = nullptr;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
};

// "[4096, 11008]": a tensor shape for messages.
inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class LoadedModel {
 public:
  virtual ~LoadedModel() = default;
  virtual const ModelConfig& config() const = 0;
  // The tensor called `name`; throws flashserve::Error naming the model path if it is missing.
  virtual const TensorView& tensor(const std::string& name) const = 0;
  virtual bool has_tensor(const std::string& name) const = 0;
  // Where the weights came from (a directory or a .bin file), for messages.
  virtual const std::string& path() const = 0;
  // tokenizer.model beside the weights (or tok*.model for llama2.c), "" if none was found.
  virtual const std::string& tokenizer_path() const = 0;
  // When no config file named an eos_token_id (llama2.c checkpoints have no config at all), the
  // tokenizer's EOS id becomes the one. Call before the config is copied (ModelRunner::create).
  virtual void use_tokenizer_eos(int eos_id) = 0;
};

// Quantization applied while loading: kFp8 turns the seven projections of every layer (and a
// mixture of experts' expert projections) into FP8 E4M3 with one scale per output row
// (weights/fp8_weights.h: is_fp8_projection); the other tensors stay as stored.
enum class Quantize { kNone, kFp8 };
// What the model is loaded for. It matters only for an HF checkpoint saved without lm_head.weight
// and with untied embeddings (a bare Qwen3Model, as Qwen3-Embedding-8B is saved): embedding steps
// (LogitsWanted::kHidden) never read the head, so kEmbed loads it with the head tied to the
// embeddings, kAuto does so when the folder declares a sentence-transformers Pooling module
// (weights/pooling_config.h), and kGenerate refuses it with an error naming the tensor.
enum class ModelTask { kGenerate, kAuto, kEmbed };
struct LoadOptions {
  Quantize quantize = Quantize::kNone;
  ModelTask task = ModelTask::kGenerate;
  // With kFp8: the projections stay as stored, marked TensorView::to_fp8, and the backend that
  // loads them quantizes them (the CUDA backend on the GPU, in a fraction of the host's time).
  // Off: they are FP8 views here, quantized on the host. Not under tensor parallelism, whose
  // column cuts need FP8 rows cut from whole ones.
  bool fp8_in_backend = false;
};
// "none" or "fp8" (the --quantize flag's values) as a Quantize; throws for anything else.
Quantize parse_quantize(const std::string& name);
// "generate", "auto" or "embed" (flashserve's --task values) as a ModelTask; throws otherwise.
ModelTask parse_model_task(const std::string& name);

// Loads a model from a directory (HF: config.json + *.safetensors; llama2.c: one *.bin) or a
// llama2.c .bin file. Validates every tensor's presence, dtype and shape against the config.
// Quantizing a model that is FP8 already is an error.
std::unique_ptr<LoadedModel> load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace flashserve
