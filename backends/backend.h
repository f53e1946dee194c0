// backends/: the ops a model is written against, and one folder per device doing all of them
// (cpu/, cuda/: its GEMMs, attention routing, graphs and buffers; the kernels are in kernels/).
//
// Backend: the coarse ops the Llama forward (model/llama_model.cpp) is written against, once,
// for every device. Ops take non-owning Tensor views; every output is preallocated by the
// caller through allocate(); ops may run asynchronously on the backend's stream until
// copy_to_host() / synchronize(). Activations use compute_dtype(); logits are always f32.
// A Backend is used by one thread at a time (the engine thread).
#pragma once

#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/mxfp4_experts.h"
#include "kernels/paged_attention.h"
#include "sampling/sampler.h"
#include "backends/tensor.h"
#include "weights/loaded_model.h"

namespace flashserve {

// One step as the ops take it: model/step.h's StepPlan arrays uploaded to the device (all
// int32) plus the host-side sizes that a kernel launch needs. Built once per step (LlamaModel::
// upload_step), shared by every layer; each backend derives its kernels' arguments from it.
struct StepArgs {
  int num_seqs = 0;
  int num_tokens = 0;
  int max_q_len = 0;  // longest chunk of the step (1 for a pure decode step)
  int max_kv_len = 0;
  int block_size = 0;
  int max_blocks_per_seq = 0;
  Tensor tokens;        // [num_tokens] the new tokens
  Tensor positions;     // [num_tokens] position of each new token in its sequence
  Tensor slot_mapping;  // [num_tokens] block * block_size + offset where its K/V go
  Tensor cu_q_lens;     // [num_seqs + 1] prefix sums of q_len
  Tensor kv_lens;       // [num_seqs] cached tokens including this step's
  Tensor block_table;   // [num_seqs, max_blocks_per_seq], padded with -1
  Tensor logit_rows;    // [num_logit_rows] token rows whose logits are wanted
  // Host copies of kv_lens and cu_q_lens (valid during the step), for launch plans such as
  // split-K decode and the prefill kernel's contiguous K/V choice.
  const int32_t* host_kv_lens = nullptr;     // [num_seqs]
  const int32_t* host_cu_q_lens = nullptr;   // [num_seqs + 1]
};

// The attention kernels' arguments (kernels/paged_attention.h) for one layer of a step: its
// device arrays from StepArgs, the head counts and how the layer scores keys. Every backend derives them
// here, so the kernels see the step exactly as the plan laid it out.
inline PagedAttentionArgs paged_attention_args(const StepArgs& b, int num_q_heads,
                                               int num_kv_heads, int head_dim,
                                               const AttentionScoring& scoring = {}) {
  return PagedAttentionArgs{.num_seqs = b.num_seqs,
                            .cu_q_lens = b.cu_q_lens.as<int32_t>(),
                            .kv_lens = b.kv_lens.as<int32_t>(),
                            .block_table = b.block_table.as<int32_t>(),
                            .max_blocks_per_seq = b.max_blocks_per_seq,
                            .block_size = b.block_size,
                            .num_q_heads = num_q_heads,
                            .num_kv_heads = num_kv_heads,
                            .head_dim = head_dim,
                            .scale = scoring.scale,
                            .causal = true,
                            .window = scoring.window,
                            .softcap = scoring.softcap,
                            .sinks = scoring.sinks};
}

// The shape and dtype of `parts` stacked along dim 0 (no data): throws unless they stack (one
// dtype and row length, all with row scales or none). backends/stacked_weight.cpp.
TensorView stacked_view(std::span<const TensorView> parts);
// `parts` stacked into host memory: the rows in *bytes, FP8 row scales in *row_scales; the view
// points into them. Packed int4 parts give a packed int4 view where they are int4_stackable, else
// their f32 values; block-wise FP8 parts their f32 values.
TensorView stacked_on_host(std::span<const TensorView> parts, std::vector<char>* bytes,
                           std::vector<float>* row_scales);

// One MoE layer's routed experts as a backend laid them out (Backend::load_moe_experts). Every
// expert is a SwiGLU MLP: y = down · (silu(x · gateᵀ) * (x · upᵀ)). The views keep the loader's
// dtype and quantization (bf16, FP8 with row scales, block-wise FP8, int4), as load_weight()
// gives them; `device_tables` is the backend's own layout for its kernels (pointer and scale
// tables, a stacked copy), built once at load.
struct MoeExperts {
  int num_experts = 0;
  int hidden = 0;
  int intermediate = 0;          // per expert (this rank's slice under tensor parallelism)
  std::vector<Tensor> gate_up;   // [num_experts] each [2 * intermediate, hidden]: gate rows, then up
  std::vector<Tensor> down;      // [num_experts] each [hidden, intermediate]
  std::vector<Buffer> storage;   // owns what the views point at
  std::shared_ptr<void> device_tables;
  // gpt-oss's experts (Backend::load_mxfp4_experts) have no gate_up/down views but this: MXFP4
  // on the backend's device (kernels/mxfp4_experts.h).
  std::optional<Mxfp4Experts> mxfp4;
  std::vector<std::shared_ptr<void>> mxfp4_storage;  // owns what mxfp4 points at
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual DType compute_dtype() const = 0;  // dtype of weights and activations on this device
  // Bytes this backend may still give to the KV cache (device memory; host: a fixed budget).
  virtual size_t memory_available() const = 0;

  // Raw device memory, released when the last owner drops it.
  virtual std::shared_ptr<void> allocate_bytes(size_t bytes) = 0;
  Buffer allocate(DType dtype, std::initializer_list<int64_t> shape) {
    Buffer b;
    b.tensor = Tensor(nullptr, dtype, device(), shape);
    b.storage = allocate_bytes(b.tensor.bytes());
    b.tensor.data = b.storage.get();
    return b;
  }
  // A weight from the loader (any dtype, host memory) converted to compute_dtype() on device.
  virtual Buffer load_weight(const TensorView& w) = 0;
  // The weights `parts` stacked along dim 0 as one (one dtype and row length; 1-d vectors are
  // concatenated), as load_weight would load their host concatenation. This default makes that
  // copy; a backend that can place each part straight into the device buffer overrides it.
  virtual Buffer load_stacked_weight(std::span<const TensorView> parts);
  // What converting the packed (int4, block-FP8) weights loaded since the last call took, for
  // the log ("224 int4 weights (3.5 GB as stored) laid out on the GPU in 0.25 s"); "" if none came.
  virtual std::string take_conversion_report() { return ""; }
  virtual void copy_from_host(Tensor dst, const void* src) = 0;  // src holds dst.bytes()
  virtual void copy_to_host(void* dst, const Tensor& src) = 0;   // waits for pending ops
  virtual void synchronize() = 0;
  // The device stream the ops are queued on (cudaStream_t), for a collective library to queue
  // on it too (parallel/communicator.h); null where there is none.
  virtual void* native_stream() { return nullptr; }

  // out[i] = table[token_ids[i]]
  virtual void embedding(Tensor out,                // [num_tokens, hidden_size]
                         const Tensor& token_ids,   // [num_tokens] int32
                         const Tensor& table) = 0;  // [vocab_size, hidden_size]
  // out = x / sqrt(mean(x^2) + eps) * weight, per row (out may alias x).
  virtual void rms_norm(Tensor out,            // [n, hidden_size]
                        const Tensor& x,       // [n, hidden_size]
                        const Tensor& weight,  // [hidden_size]
                        float eps) = 0;
  // out = x · wᵀ (w in the nn.Linear layout); out is f32 or compute_dtype().
  virtual void matmul(Tensor out,            // [m, n]
                      const Tensor& x,       // [m, k]
                      const Tensor& w) = 0;  // [n, k]
  // matmul with k cut into `slices` equal slices, each slice's product computed alone and the
  // slices added in parallel/reduction_order.h's order: the row-parallel products of tensor
  // parallelism, so that on a backend with a fixed order (the CPU) the result does not depend
  // on how many ranks hold the slices (docs/TENSOR_PARALLEL.md). Others: a plain matmul.
  virtual void matmul_k_sliced(Tensor out,          // [m, n]
                               const Tensor& x,     // [m, k]
                               const Tensor& w,     // [n, k]
                               int slices) {
    matmul(out, x, w);
  }
  // Rotate-half RoPE in place: pair (i, i + head_dim/2) turns by positions[t] * inv_freq[i].
  virtual void rope(Tensor q,                     // [num_tokens, num_q_heads, head_dim]
                    Tensor k,                     // [num_tokens, num_kv_heads, head_dim]
                    const Tensor& positions,      // [num_tokens] int32
                    const Tensor& inv_freq) = 0;  // [head_dim / 2] f32
  // x[r, :] += bias, in place, for every row r (the projections' biases of Qwen2 and gpt-oss;
  // both compute_dtype(), or both f32: gpt-oss's router logits).
  virtual void add_bias(Tensor x,                 // [n, width]
                        const Tensor& bias) = 0;  // [width]
  // Per-head RMSNorm of q and k in place, before RoPE (Qwen3): heads [0, num_q_heads) of each
  // token are normed with q_weight, the next num_kv_heads with k_weight, the v heads after them
  // are left alone. Each head: h / sqrt(mean(h^2) + eps) * weight.
  virtual void qk_norm(Tensor qkv,  // [num_tokens, num_q_heads + 2 num_kv_heads, head_dim]
                       const Tensor& q_weight,   // [head_dim]
                       const Tensor& k_weight,   // [head_dim]
                       int num_q_heads, int num_kv_heads, float eps) = 0;
  // out = silu(gate) * up (out may alias gate or up)
  virtual void swiglu(Tensor out,             // [n, intermediate_size]
                      const Tensor& gate,     // [n, intermediate_size]
                      const Tensor& up) = 0;  // [n, intermediate_size]
  // out = a + b elementwise (out may alias a or b).
  virtual void add(Tensor out, const Tensor& a, const Tensor& b) = 0;  // all the same shape
  // out[r] = x[row_ids[r]]
  virtual void gather_rows(Tensor out,                  // [num_rows, hidden_size]
                           const Tensor& x,             // [num_tokens, hidden_size]
                           const Tensor& row_ids) = 0;  // [num_rows] int32
  // Writes token t's K/V to slot slot_mapping[t] of one layer's cache.
  virtual void write_kv(Tensor k_cache,   // [num_blocks, block_size, num_kv_heads, head_dim]
                        Tensor v_cache,   // [num_blocks, block_size, num_kv_heads, head_dim]
                        const Tensor& k,  // [num_tokens, num_kv_heads, head_dim]
                        const Tensor& v,  // [num_tokens, num_kv_heads, head_dim]
                        const Tensor& slot_mapping) = 0;  // [num_tokens] int32
  // Fused ops of the forward (one kernel each on the GPU):
  // x += delta; out = rms_norm(x) * weight (the residual add and the next block's norm).
  virtual void add_rms_norm(Tensor out,            // [n, hidden_size]
                            Tensor x,              // [n, hidden_size] residual, updated
                            const Tensor& delta,   // [n, hidden_size]
                            const Tensor& weight,  // [hidden_size]
                            float eps) = 0;
  // Splits the fused QKV projection, turns q and k by RoPE (as rope()), writes q to `q` and
  // k, v to their cache slots (as write_kv()).
  virtual void qkv_rope_write_kv(
      Tensor q,                      // [num_tokens, num_q_heads, head_dim]
      Tensor k_cache,                // [num_blocks, block_size, num_kv_heads, head_dim]
      Tensor v_cache,                // [num_blocks, block_size, num_kv_heads, head_dim]
      const Tensor& qkv,             // [num_tokens, (num_q_heads + 2 num_kv_heads) head_dim]
      const Tensor& positions,       // [num_tokens] int32
      const Tensor& inv_freq,        // [head_dim / 2] f32
      const Tensor& slot_mapping) = 0;  // [num_tokens] int32
  // out = silu(gate) * up with gate_up = [gate | up] per row (the fused gate/up projection).
  virtual void swiglu_fused(Tensor out,                  // [n, intermediate_size]
                            const Tensor& gate_up) = 0;  // [n, 2 * intermediate_size]
  // out = gelu_tanh(gate) * up, likewise (Gemma's GeGLU; GELU's tanh approximation).
  virtual void geglu_fused(Tensor out,                  // [n, intermediate_size]
                           const Tensor& gate_up) = 0;  // [n, 2 * intermediate_size]
  // x *= factor in place (Gemma's embedding normalizer), compute_dtype().
  virtual void scale(Tensor x, float factor) = 0;
  // x = cap * tanh(x / cap) in place (Gemma 2's final logit soft-cap).
  virtual void softcap(Tensor x,  // [rows, vocab] f32
                       float cap) = 0;
  // Fused with the projection after it (docs/DECODE.md). The default composes the ops above,
  // and the CPU backend uses it, so its results are those of the unfused forward; the CUDA
  // backend runs it as one kernel where that measured faster (the reference twin is
  // kernels/cpu/fused_decode_ref.h).
  // x_out = x + delta; out = (rms_norm(x_out) * norm_w) · wᵀ: a residual add, the next RMSNorm
  // and the projection that reads it. With delta empty x is normed as is and x_out is not
  // written (it may be empty). `h` is scratch for backends that compose the op (it may alias
  // delta); x_out must not alias x or delta, and out none of the inputs.
  virtual void add_rms_norm_matmul(Tensor out,             // [m, n] f32 or compute_dtype()
                                   Tensor h,               // [m, hidden] scratch
                                   Tensor x_out,           // [m, hidden] or empty
                                   const Tensor& x,        // [m, hidden]
                                   const Tensor& delta,    // [m, hidden] or empty
                                   const Tensor& norm_w,   // [hidden]
                                   float eps,
                                   const Tensor& w) {      // [n, hidden]
    if (delta.data != nullptr) {
      add(x_out, x, delta);
      rms_norm(h, x_out, norm_w, eps);
    } else {
      rms_norm(h, x, norm_w, eps);
    }
    matmul(out, h, w);
  }
  // ids[r] = argmax of logits row r, ties to the lowest id (the host sampler's greedy choice);
  // -1 when the row holds a NaN.
  virtual void argmax_rows(Tensor ids,               // [rows] int32
                           const Tensor& logits) = 0;  // [rows, vocab] f32
  // ids[i] = the host sampler's token (sampling/sampler.h: bias, penalties, temperature, top-k,
  // top-p, min-p, the same Philox draw) for logits row rows[i] under requests[i]; -1 when that
  // row holds a NaN. Runs where the logits are and waits; invalid parameters throw.
  virtual void sample_rows(int32_t* ids,                              // [n] host memory
                           const Tensor& logits,                      // [rows, vocab] f32
                           std::span<const int64_t> rows,             // [n]
                           std::span<const SampleRequest> requests) = 0;  // [n]
  // Causal paged attention over the block table (kernels/paged_attention.h); K/V of this
  // step's tokens must already be written.
  virtual void paged_attention(
      Tensor out,             // [num_tokens, num_q_heads, head_dim]
      const Tensor& q,        // [num_tokens, num_q_heads, head_dim]
      const Tensor& k_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
      const Tensor& v_cache,  // [num_blocks, block_size, num_kv_heads, head_dim]
      const StepArgs& batch, const AttentionScoring& scoring) = 0;

  // ---- Mixture of experts (docs/MODELS.md) -------------------------------------------------
  // The routed experts of one layer: expert e's gate, up and down projections (loader views).
  // The default loads each expert's [gate; up] with load_stacked_weight() and down with
  // load_weight(); a backend whose kernels want another layout overrides it.
  virtual std::shared_ptr<MoeExperts> load_moe_experts(std::span<const TensorView> gate,
                                                       std::span<const TensorView> up,
                                                       std::span<const TensorView> down);
  // gpt-oss's experts (MoeExperts::mxfp4): gate_up [E, 2I, hidden] and down [E, hidden, I]
  // carry TensorView::mxfp4; biases [E, 2I] and [E, hidden] of any float dtype. The default
  // copies the packed bytes as they are to the device (no dequantized copy) and the biases as f32.
  virtual std::shared_ptr<MoeExperts> load_mxfp4_experts(const TensorView& gate_up,
                                                         const TensorView& gate_up_bias,
                                                         const TensorView& down,
                                                         const TensorView& down_bias,
                                                         float swiglu_limit, float swiglu_alpha);
  // Routing: per row, the top_k experts by router logit (ties to the lower expert id, as
  // torch.topk does on the CPU) and their weights softmax(logits)[ids]; with `renormalize`
  // the k weights are divided by their sum (norm_topk_prob; Mixtral always). Weights are f32.
  virtual void moe_route(Tensor expert_ids,        // [n, top_k] int32
                         Tensor weights,           // [n, top_k] f32
                         const Tensor& logits,     // [n, num_experts] f32
                         int top_k, bool renormalize) {
    FS_THROW("backend ", name(), " has no mixture-of-experts ops");
  }
  // out[t] = sum_j weights[t, j] * expert_{expert_ids[t, j]}(x[t]), for every row t; rows and
  // experts in any order, no host synchronisation (it may run under graph capture).
  virtual void moe_experts(Tensor out,                 // [n, hidden] compute_dtype()
                           const Tensor& x,            // [n, hidden] compute_dtype()
                           const Tensor& expert_ids,   // [n, top_k] int32
                           const Tensor& weights,      // [n, top_k] f32
                           const MoeExperts& experts) {
    FS_THROW("backend ", name(), " has no mixture-of-experts ops");
  }
  // out += sigmoid(gate_logit[r]) * y[r, :] per row (Qwen2-MoE's gated shared expert).
  virtual void add_sigmoid_gated(Tensor out,                  // [n, hidden]
                                 const Tensor& y,             // [n, hidden]
                                 const Tensor& gate_logit) {  // [n, 1] f32 or compute_dtype()
    FS_THROW("backend ", name(), " has no mixture-of-experts ops");
  }

  // ---- Graph capture and replay (optional; the CUDA backend has it, as CUDA graphs) ----------
  // A pure decode step can be recorded once and replayed: LlamaModel pads it to a bucket (see
  // model/decode_graphs.h) and asks here for the step's launch key. It is everything this
  // backend decides from host data beyond the tensor shapes (the split-K decode plan, say); the
  // call also sizes the backend's own workspaces for the step, so that nothing is allocated
  // while recording. `windows`: the distinct sliding windows of the model's layers (0 = full
  // attention), each of which may plan differently. Returns false when this backend cannot
  // replay the step.
  virtual bool graph_launch_key(const StepArgs& batch, int num_q_heads, int num_kv_heads,
                                int head_dim, std::span<const int> windows, uint64_t* key) {
    return false;
  }
  // Bumped whenever the backend reallocates a workspace that a recorded graph may point at.
  virtual uint64_t graph_epoch() const { return 0; }
  // Between begin_capture() and end_capture() ops are recorded, not run (host copies and
  // synchronize() are not allowed). end_capture() returns the replayable graph; abort_capture()
  // ends a recording that failed half-way, dropping it.
  virtual void begin_capture() { FS_THROW("backend ", name(), " cannot record graphs"); }
  virtual std::shared_ptr<void> end_capture() { FS_THROW("backend ", name(), " cannot record graphs"); }
  virtual void abort_capture() {}
  virtual void replay(const std::shared_ptr<void>& graph) {
    FS_THROW("backend ", name(), " cannot replay graphs");
  }
};

// threads: worker threads for matmul and attention; 0 = hardware concurrency.
std::unique_ptr<Backend> make_cpu_backend(int threads);

// The CUDA backend on `device` (backends/cuda/cuda_backend.cpp); throws flashserve::Error when built
// without CUDA or when no device is present. Matmuls of up to gemv_max_rows rows go through the
// skinny-matmul kernel instead of cuBLASLt (-1: the default, kernels/gemv.h's kGemvDefaultRows;
// 0: always cuBLASLt, the baseline the op benchmark compares against).
std::unique_ptr<Backend> make_cuda_backend(int device, int gemv_max_rows = -1);
// True when built with CUDA and at least one device is visible.
bool cuda_backend_available();

}  // namespace flashserve
