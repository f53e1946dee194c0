// The Llama-family forward pass (embedding, RMSNorm, q/k/v biases (Qwen2), per-head q/k RMSNorm
// (Qwen3), RoPE with its scalings, partial rotary, NoPE and local layers (model/rope_tables.h),
// grouped-query paged attention with per-layer windows and soft-caps, SwiGLU or GeGLU MLP,
// Gemma's sandwich norms, tied or untied head; Olmo2's post-norm layers in
// model/post_norm_layer.cpp, mixture-of-experts layers in model/moe_layer.cpp), written once against Backend ops so every backend shares it.
// Weights are uploaded once at construction, with the families' constant factors folded in;
// activations live in a workspace that grows to the largest step seen. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "backends/backend.h"
#include "model/decode_graphs.h"
#include "model/kv_cache.h"
#include "model/rope_tables.h"
#include "model/step.h"
#include "parallel/shard_plan.h"
#include "weights/loaded_model.h"

namespace flashserve {

class LlamaModel {
 public:
  // With `shard`: tensor parallelism, this rank's slice of the model (parallel/shard_plan.h);
  // every rank of the group runs each step, and every rank's logits are the whole model's.
  LlamaModel(Backend& backend, const LoadedModel& model, const TensorShard* shard = nullptr);
  const ModelConfig& config() const { return config_; }
  // Runs a laid-out `step` (its K/V are written into `cache`) and copies the wanted rows'
  // logits, their argmax (Backend::argmax_rows) and/or their final-norm hidden states (as f32)
  // to the host; any pointer may be null. A step whose rows all want hidden states
  // (LogitsWanted::kHidden) skips the lm_head.
  void forward(const StepPlan& step, KvCache& cache,
               float* logits,   // [num_logit_rows, vocab_size] host memory, or null
               int32_t* argmax,  // [num_logit_rows] host memory, or null
               float* hidden);   // [num_logit_rows, hidden_size] host memory, or null
  // forward() in two halves: launch() queues the step on the backend's stream (with `argmax`,
  // also the rows' argmax) and returns; collect() copies the outputs as forward() does and
  // waits. The host may work between the two while the device runs.
  void launch(const StepPlan& step, KvCache& cache, bool argmax);
  void collect(float* logits,   // [num_logit_rows, vocab_size] host memory, or null
               int32_t* argmax,  // [num_logit_rows] host memory, or null
               float* hidden);   // [num_logit_rows, hidden_size] host memory, or null

  // The last forward's logits [num_logit_rows (padded to a graph bucket), vocab_size] f32, on
  // the backend's device; valid until the next forward.
  const Tensor& logits() const { return last_logits_; }

  // Pure decode steps of up to `max_batch` sequences are recorded once per shape bucket and
  // replayed (model/decode_graphs.h) when the backend can; 0 turns that off (every step eager).
  void set_graph_max_batch(int max_batch) { graph_max_batch_ = max_batch; }
  uint64_t graphs_recorded() const { return graphs_.captures(); }

  // Tensor parallelism (model/llama_model_parallel.cpp): whether `step` would run a matrix
  // product of a row count this model has not run yet, and running those products once, on this
  // rank's thread with no collective in flight (TensorParallelRunner::forward says why).
  bool has_new_matmul_rows(const StepPlan& step) const;
  void warm_up_matmuls(const StepPlan& step);
  // Memory for the row-parallel products' outputs (the all-reduced block outputs, [rows,
  // hidden_size] of the compute dtype) in steps of up to `rows` tokens: the communicator's
  // symmetric buffer (Communicator::symmetric_buffer), used where it fits; larger steps use the
  // workspace as before.
  void set_reduce_buffer(void* mem, int64_t rows) { reduce_mem_ = mem, reduce_rows_ = rows; }

 private:
  // The plan's arrays on the device (one upload): the step's StepArgs.
  StepArgs upload_step(const StepPlan& step, KvCache& cache);
  // Embedding .. lm_head for the uploaded step; the final-norm rows land in ws_.sel [rows,
  // hidden] (compute dtype), with `logits` their logits in ws_.logits [rows, vocab] f32, and
  // with `argmax` too their argmax in ws_.argmax [rows] int32. identity_rows: the logit rows are
  // every token in order (0, 1, .., rows - 1), so the last residual add goes with the norm.
  void run_layers(const StepArgs& step, KvCache& cache, int64_t rows, bool argmax,
                  bool identity_rows, bool logits = true);
  // The first `rows` rows of ws_.sel to the host as f32 (kHidden rows' pooled output).
  void copy_hidden(float* hidden,  // [rows, hidden_size] host memory
                   int64_t rows);
  // The decode-step graph path (replayed, not waited for); false when this step must run
  // eagerly.
  bool launch_graph(const StepPlan& step, KvCache& cache);

  struct Layer {
    Buffer input_norm;
    Buffer wqkv;  // [(hq + 2 hkv) head_dim, hidden]: q_proj, k_proj, v_proj stacked by rows
    Buffer bqkv;  // [(hq + 2 hkv) head_dim]: their biases stacked (qkv_bias only)
    Buffer q_norm, k_norm;  // [head_dim] each (qk_norm); [{q,kv} heads * head_dim] (qk_norm_full)
    Buffer wo;
    Buffer bo;     // [hidden] o_proj's bias (o_bias only)
    Buffer sinks;  // [hq] f32 attention sink logits (attention_sinks only)
    Buffer attn_out_norm;  // [hidden] on the attention output (sandwich_norms only)
    Buffer post_norm;  // [hidden] before the MLP (Gemma: pre_feedforward_layernorm; Olmo2: after
                       // attention)
    Buffer post_ff_norm;  // [hidden] after the MLP (post_norms only)
    Buffer w_gate_up;  // [2 intermediate, hidden]: gate_proj then up_proj
    Buffer w_down;
    // A mixture-of-experts layer (model/moe_layer.cpp) has these instead of w_gate_up, w_down:
    Buffer router;  // [num_experts, hidden]
    Buffer router_bias;  // [num_experts] f32 (gpt-oss)
    std::shared_ptr<MoeExperts> experts;  // this rank's columns of every expert
    Buffer shared_gate_up;  // [2 shared intermediate, hidden] (Qwen2-MoE's shared expert)
    Buffer shared_down;     // [hidden, shared intermediate]
    Buffer shared_gate;     // [1, hidden]: its sigmoid gate's weight
  };
  // Loads the weights stacked along dim 0 as one (they must share dtype and row length; 1-d
  // vectors such as biases are concatenated).
  // With `order`/`factor`, the stacked rows are rewritten first (model/weight_rows.h).
  Buffer load_stacked(const LoadedModel& model, const std::vector<std::string>& names,
                      const std::vector<int>& order = {}, const std::vector<float>& factor = {});
  // This rank's slice of weight `name` with every row multiplied by `factor`.
  Buffer load_scaled(const TensorView& full, const std::string& name, float factor);
  // A mixture-of-experts layer's weights (model/moe_layer.cpp): router, experts, shared expert.
  void load_moe_layer(const LoadedModel& model, int layer, Layer& L);
  // out = the layer's mixture of experts on `in` (its normed input), summed over the ranks.
  void run_moe(const Layer& L,
               Tensor out,          // [n, hidden_size]
               const Tensor& in);   // [n, hidden_size]
  // One Olmo2 layer (model/post_norm_layer.cpp): x += norm(attention(x)); x += norm(mlp(x)).
  void run_post_norm_layer(const Layer& L, int layer, const StepArgs& step, KvCache& cache,
                           Tensor x,   // [num_tokens, hidden_size] residual, updated
                           Tensor h);  // [num_tokens, hidden_size] scratch
  // Per-layer settings (model/layer_settings.cpp). The RoPE tables, softmax scale, distinct
  // windows and embedding normalizer, from config_:
  void load_layer_settings();
  // Layer l's inverse frequencies: the RoPE table, the local one, or zeros for a NoPE layer.
  const Tensor& layer_inv_freq(int layer) const;
  // How layer l scores its keys: the softmax scale, its window and the attention soft-cap.
  AttentionScoring layer_scoring(int layer) const;
  // Vector `name` as f32 on the device, whatever the compute dtype (sinks, the router's bias).
  Buffer load_f32(const LoadedModel& model, const std::string& name);
  // Norm weight `name` (this rank's), with Gemma's 1 + weight folded in (norm_weight_plus_one).
  Buffer load_norm(const LoadedModel& model, const std::string& name);
  // A view of `shape` over `buf`, regrown (contents lost) when it is too small.
  Tensor scratch(Buffer& buf, DType dtype, std::initializer_list<int64_t> shape);
  // Tensor parallelism (model/llama_model_parallel.cpp): this rank's slice of weight `name`
  // (the whole weight without a shard), and the products that join the ranks' slices.
  TensorView shard_view(const TensorView& full, const std::string& name,
                        std::vector<char>& storage) const;
  Buffer load_shard(const TensorView& full, const std::string& name);
  void row_parallel_matmul(Tensor out,        // [n, hidden_size], summed over the ranks
                           const Tensor& x,   // [n, k / size] this rank's columns
                           const Tensor& w);  // [hidden_size, k / size]
  void vocab_parallel_logits(Tensor out,          // [rows, vocab_size] f32, every rank's rows
                             const Tensor& x,     // [rows, hidden_size]
                             const Tensor& head);  // [vocab_size / size, hidden_size]
  const Tensor& gather_order(int64_t rows);  // [rows * size] int32, see vocab_parallel_logits
  // The token and logit-row counts `step`'s products run at: its own, and a decode step's graph
  // bucket (which pads both) when graphs are on.
  // The block-output buffer h of an n-token step: [n, hidden_size], the reduce buffer where set
  // and large enough, else the workspace's.
  Tensor block_out(int64_t n);
  std::vector<int64_t> matmul_token_rows(const StepPlan& step) const;
  std::vector<int64_t> matmul_logit_rows(const StepPlan& step) const;

  Backend& backend_;
  ModelConfig config_;
  std::optional<TensorShard> shard_;
  // This rank's sizes (the whole model's without a shard) and k-slices of o/down products.
  int hq_ = 0, hkv_ = 0, k_slices_ = 1;
  int64_t inter_ = 0, vocab_ = 0;
  int64_t moe_inter_ = 0, shared_inter_ = 0;  // each expert's and the shared expert's columns
  bool dense_mlp_ = true;  // some layer has a dense MLP (a Mixtral has none)
  Buffer embed_, final_norm_, lm_head_, inv_freq_;  // lm_head_ empty when tied
  Buffer no_rope_;  // [head_dim / 2] zeros, for NoPE layers
  Buffer local_inv_freq_;  // [head_dim / 2] Gemma 3's local layers' table
  float attention_scale_ = 0.f;  // the softmax scale
  float embed_scale_ = 1.f;  // Gemma's embedding normalizer, in the compute dtype's rounding
  std::vector<int> windows_;  // the layers' distinct sliding windows (empty: all full)
  std::vector<Layer> layers_;
  struct Workspace {
    Buffer meta;  // int32: tokens, positions, slots, cu_q_lens, kv_lens, block table, logit rows
    Buffer x, x_next, h, qkv, q, attn, gate_up, gate, sel, logits, argmax;
    Buffer logits_local, gathered;  // tensor parallelism: this rank's vocabulary rows, all ranks'
    // Mixture of experts: the normed input, router logits, each row's experts and weights, and
    // the shared expert's activations, output and gate logit.
    Buffer moe_in, router_logits, expert_ids, expert_weights;
    Buffer shared_gate_up, shared_act, shared_out, shared_logit;
  } ws_;
  std::map<int64_t, Buffer> gather_order_;  // by number of rows (kept: graphs point at them)
  uint64_t ws_epoch_ = 0;           // bumped whenever a workspace buffer is reallocated
  std::vector<int32_t> meta_host_;  // staging for the metadata upload
  int graph_max_batch_ = 0;
  StepPlan graph_plan_;  // the padded decode step (arrays only)
  GraphCache graphs_;
  Tensor last_logits_;  // logits()
  // launch()'s output rows on the device (padded to a graph bucket) and those wanted back.
  int64_t launched_rows_ = 0, launched_wanted_ = 0;
  std::set<int64_t> warm_token_rows_, warm_logit_rows_;  // warm_up_matmuls' row counts so far
  void* reduce_mem_ = nullptr;  // set_reduce_buffer
  int64_t reduce_rows_ = 0;
};

}  // namespace flashserve
