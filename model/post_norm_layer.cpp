// Olmo2's layer (post_norms, qk_norm_full): no norm before a block, an RMSNorm on each block's
// output before the residual add, and q and k each RMSNormed over the whole projection (every
// head at once) before RoPE:
//   q, k, v = x·Wqᵀ, x·Wkᵀ, x·Wvᵀ;  q, k = rms_norm(q), rms_norm(k);  rope(q, k); write k, v;
//   x += rms_norm(paged_attention(q)·Woᵀ);  x += rms_norm((silu(x·Wgᵀ) * x·Wuᵀ)·Wdᵀ)
// The q/k norms need q and k as contiguous rows of their own, so the three projections run as
// three products (row ranges of the stacked Wqkv) instead of the fused split-rope-write op.
#include "model/llama_model.h"

namespace flashserve {

void LlamaModel::run_post_norm_layer(const Layer& L, int l, const StepArgs& b, KvCache& cache,
                                     Tensor x, Tensor h) {
  const ModelConfig& c = config_;
  const int64_t n = b.num_tokens, d = c.head_dim, hq = hq_, hkv = hkv_;
  const DType act = backend_.compute_dtype();
  const float eps = c.rms_norm_eps;
  Tensor q = scratch(ws_.q, act, {n, hq, d});
  Tensor kv = scratch(ws_.qkv, act, {2, n, hkv * d});  // k's rows, then v's
  Tensor k = kv.rows(0, 1).view({n, hkv, d}), v = kv.rows(1, 1).view({n, hkv, d});
  Tensor attn = scratch(ws_.attn, act, {n, hq, d});
  Tensor gate_up = scratch(ws_.gate_up, act, {n, 2 * inter_});
  Tensor gate = scratch(ws_.gate, act, {n, inter_});

  const Tensor& w = L.wqkv.tensor;
  Tensor q2 = q.view({n, hq * d}), k2 = k.view({n, hkv * d});
  backend_.matmul(q2, x, w.rows(0, hq * d));
  backend_.matmul(k2, x, w.rows(hq * d, hkv * d));
  backend_.matmul(v.view({n, hkv * d}), x, w.rows((hq + hkv) * d, hkv * d));
  backend_.rms_norm(q2, q2, L.q_norm.tensor, eps);
  backend_.rms_norm(k2, k2, L.k_norm.tensor, eps);
  backend_.rope(q, k, b.positions, layer_inv_freq(l));
  backend_.write_kv(cache.k(l), cache.v(l), k, v, b.slot_mapping);
  backend_.paged_attention(attn, q, cache.k(l), cache.v(l), b, layer_scoring(l));
  row_parallel_matmul(h, attn.view({n, hq * d}), L.wo.tensor);
  backend_.rms_norm(h, h, L.post_norm.tensor, eps);
  backend_.add(x, x, h);

  backend_.matmul(gate_up, x, L.w_gate_up.tensor);
  backend_.swiglu_fused(gate, gate_up);
  row_parallel_matmul(h, gate, L.w_down.tensor);
  backend_.rms_norm(h, h, L.post_ff_norm.tensor, eps);
  backend_.add(x, x, h);
}

}  // namespace flashserve
