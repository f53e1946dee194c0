// A mixture-of-experts layer's MLP block (Qwen2-MoE, Qwen3-MoE, Mixtral, gpt-oss; docs/MODELS.md):
//   logits = h·Wrᵀ (f32);  per row, ids, w = the top_k experts by softmax(logits) and their
//   probabilities (divided by their sum with norm_topk_prob);
//   out = sum_j w_j · down_{ids_j}(silu(gate_{ids_j}·h) * up_{ids_j}·h)
//   Qwen2-MoE: out += sigmoid(h·Wsgᵀ) · shared_expert(h), a dense SwiGLU MLP of its own.
//   gpt-oss: logits += router bias; ids, w = the top_k logits and their softmax (the same as the
//   renormalised top-k of the softmax); each expert (MXFP4, Backend::load_mxfp4_experts) is
//   down(swiglu_clamped(gate_up·h + bgu)) + bd, gate/up rows interleaved.
// Under tensor parallelism every rank holds the same columns of every expert's intermediate
// dimension (and of the shared expert's) and the whole router, so every rank routes alike and
// adds a partial sum: one all-reduce per layer, as for a dense MLP. The backend lays the
// experts out for its kernels (Backend::load_moe_experts).
#include <string>
#include <vector>

#include "core/error.h"
#include "model/llama_model.h"
#include "parallel/communicator.h"
#include "weights/llama_tensors.h"

namespace flashserve {

void LlamaModel::load_moe_layer(const LoadedModel& model, int layer, Layer& L) {
  const ModelConfig& c = config_;
  const std::string router = moe_router_name(c, layer);
  L.router = load_shard(model.tensor(router), router);
  if (mxfp4_experts(c)) {  // gpt-oss: a router bias, MXFP4 experts with biases
    L.router_bias = load_f32(model, moe_router_bias_name(layer));
    const std::string gu = moe_stacked_name(layer, ExpertProj::kGate);
    const std::string down = moe_stacked_name(layer, ExpertProj::kDown);
    L.experts = backend_.load_mxfp4_experts(model.tensor(gu), model.tensor(gu + "_bias"),
                                            model.tensor(down), model.tensor(down + "_bias"),
                                            c.moe.swiglu_limit, c.moe.swiglu_alpha);
    FS_CHECK(L.experts && L.experts->mxfp4 && L.experts->num_experts == c.moe.num_experts &&
                 L.experts->intermediate == moe_inter_ && L.experts->hidden == c.hidden_size,
             "layer ", layer, ": the backend did not lay out the MXFP4 experts as the config says");
    return;
  }
  // Column cuts (down under tensor parallelism) are copies that must outlive the load.
  const size_t n = size_t(c.moe.num_experts);
  std::vector<std::vector<char>> storage(3 * n);
  std::vector<TensorView> gate, up, down;
  for (int e = 0; e < c.moe.num_experts; ++e) {
    auto view = [&](ExpertProj which, std::vector<char>& bytes) {
      const std::string name = moe_expert_name(c, layer, e, which);
      return shard_view(model.tensor(name), name, bytes);
    };
    gate.push_back(view(ExpertProj::kGate, storage[3 * size_t(e)]));
    up.push_back(view(ExpertProj::kUp, storage[3 * size_t(e) + 1]));
    down.push_back(view(ExpertProj::kDown, storage[3 * size_t(e) + 2]));
  }
  L.experts = backend_.load_moe_experts(gate, up, down);
  FS_CHECK(L.experts && L.experts->num_experts == c.moe.num_experts &&
               L.experts->intermediate == moe_inter_ && L.experts->hidden == c.hidden_size,
           "layer ", layer, ": the backend laid out ", L.experts ? L.experts->num_experts : 0,
           " experts of ", L.experts ? L.experts->intermediate : 0, " columns, not ",
           c.moe.num_experts, " of ", moe_inter_);
  if (c.moe.shared_intermediate == 0) return;
  L.shared_gate_up = load_stacked(model, {moe_shared_name(layer, ExpertProj::kGate),
                                          moe_shared_name(layer, ExpertProj::kUp)});
  const std::string shared_down = moe_shared_name(layer, ExpertProj::kDown);
  L.shared_down = load_shard(model.tensor(shared_down), shared_down);
  const std::string shared_gate = moe_shared_gate_name(layer);
  L.shared_gate = load_shard(model.tensor(shared_gate), shared_gate);
}

void LlamaModel::run_moe(const Layer& L, Tensor out, const Tensor& in) {
  const MoeConfig& m = config_.moe;
  const int64_t n = in.dim(0), hidden = config_.hidden_size;
  const DType act = backend_.compute_dtype();
  Tensor logits = scratch(ws_.router_logits, DType::kF32, {n, int64_t(m.num_experts)});
  Tensor ids = scratch(ws_.expert_ids, DType::kI32, {n, int64_t(m.top_k)});
  Tensor weights = scratch(ws_.expert_weights, DType::kF32, {n, int64_t(m.top_k)});
  backend_.matmul(logits, in, L.router.tensor);
  if (L.router_bias.storage) backend_.add_bias(logits, L.router_bias.tensor);
  backend_.moe_route(ids, weights, logits, m.top_k, m.renormalize);
  backend_.moe_experts(out, in, ids, weights, *L.experts);
  if (L.shared_gate_up.storage) {
    Tensor gate_up = scratch(ws_.shared_gate_up, act, {n, 2 * shared_inter_});
    Tensor gate = scratch(ws_.shared_act, act, {n, shared_inter_});
    Tensor y = scratch(ws_.shared_out, act, {n, hidden});
    Tensor gate_logit = scratch(ws_.shared_logit, DType::kF32, {n, 1});
    backend_.matmul(gate_up, in, L.shared_gate_up.tensor);
    backend_.swiglu_fused(gate, gate_up);
    backend_.matmul(y, gate, L.shared_down.tensor);
    backend_.matmul(gate_logit, in, L.shared_gate.tensor);
    // The gate is the same on every rank and scales this rank's partial sum: the all-reduce
    // below sums gated parts, which is the gated whole.
    backend_.add_sigmoid_gated(out, y, gate_logit);
  }
  if (shard_) shard_->comm->all_reduce_sum(out.data, out.numel(), out.dtype);
}

}  // namespace flashserve
