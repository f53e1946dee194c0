// LlamaModel's tensor-parallel pieces (parallel/shard_plan.h): which slice of each weight this
// rank loads, and the three products whose results join the ranks: o_proj and down_proj
// (row-parallel: this rank's partial sum, then one all-reduce each) and the vocabulary
// projection (this rank's rows of the logits, then a gather). Without a shard they are the plain
// products, o and down still added in k-slices (shard_plan.h: row_parallel_slices).
#include "core/error.h"
#include "model/llama_model.h"
#include "parallel/communicator.h"

namespace flashserve {

TensorView LlamaModel::shard_view(const TensorView& full, const std::string& name,
                                  std::vector<char>& storage) const {
  if (!shard_) return full;
  return slice_weight(full, weight_split(shard_->plan, config_, name), storage);
}

Buffer LlamaModel::load_shard(const TensorView& full, const std::string& name) {
  std::vector<char> storage;  // a column slice's copy, until the backend has converted it
  return backend_.load_weight(shard_view(full, name, storage));
}

void LlamaModel::row_parallel_matmul(Tensor out, const Tensor& x, const Tensor& w) {
  backend_.matmul_k_sliced(out, x, w, k_slices_);
  if (shard_) shard_->comm->all_reduce_sum(out.data, out.numel(), out.dtype);
}

void LlamaModel::vocab_parallel_logits(Tensor out, const Tensor& x, const Tensor& head) {
  if (!shard_) return backend_.matmul(out, x, head);
  Communicator& comm = *shard_->comm;
  const int64_t rows = out.dim(0), size = comm.size();
  Tensor local = scratch(ws_.logits_local, DType::kF32, {rows, vocab_});
  backend_.matmul(local, x, head);
  if (rows == 1 || size == 1) {  // the gather's [size, rows, vocab / size] is already out's layout
    comm.all_gather(local.data, out.data, local.numel(), DType::kF32);
    return;
  }
  Tensor all = scratch(ws_.gathered, DType::kF32, {size * rows, vocab_});
  comm.all_gather(local.data, all.data, local.numel(), DType::kF32);
  // all: [size, rows, vocab / size] (rank-major); out: [rows, size, vocab / size].
  backend_.gather_rows(out.view({rows * size, vocab_}), all, gather_order(rows));
}

const Tensor& LlamaModel::gather_order(int64_t rows) {
  auto it = gather_order_.find(rows);
  if (it != gather_order_.end()) return it->second.tensor;
  if (gather_order_.size() >= 64) {  // many step shapes (prompt logprobs): start over
    gather_order_.clear();
    ++ws_epoch_;  // recorded graphs may point at the ones dropped
  }
  const int64_t size = shard_->plan.size;
  std::vector<int32_t> ids(size_t(rows * size));  // out row (r, rank) = all row (rank, r)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < size; ++k) ids[size_t(r * size + k)] = int32_t(k * rows + r);
  Buffer b = backend_.allocate(DType::kI32, {rows * size});
  backend_.copy_from_host(b.tensor, ids.data());
  backend_.synchronize();  // before `ids` goes
  return gather_order_.emplace(rows, std::move(b)).first->second.tensor;
}

Tensor LlamaModel::block_out(int64_t n) {
  const DType act = backend_.compute_dtype();
  if (reduce_mem_ && n <= reduce_rows_)  // a fixed buffer: recorded graphs stay valid
    return Tensor(reduce_mem_, act, backend_.device(), {n, int64_t(config_.hidden_size)});
  return scratch(ws_.h, act, {n, int64_t(config_.hidden_size)});
}

std::vector<int64_t> LlamaModel::matmul_token_rows(const StepPlan& s) const {
  std::vector<int64_t> rows = {int64_t(s.tokens.size())};
  if (graph_max_batch_ > 0 && s.max_q_len == 1)
    if (const int bucket = graph_batch_bucket(s.num_seqs, graph_max_batch_); bucket > 0)
      rows.push_back(bucket);
  return rows;
}

std::vector<int64_t> LlamaModel::matmul_logit_rows(const StepPlan& s) const {
  std::vector<int64_t> rows = matmul_token_rows(s);
  rows[0] = int64_t(s.logit_rows.size());
  return rows;
}

bool LlamaModel::has_new_matmul_rows(const StepPlan& s) const {
  for (int64_t n : matmul_token_rows(s))
    if (n > 0 && !warm_token_rows_.count(n)) return true;
  for (int64_t n : matmul_logit_rows(s))
    if (n > 0 && !warm_logit_rows_.count(n)) return true;
  return false;
}

// Every product run_layers would run at these row counts, once each, on the buffers it would use
// (so the same shapes, pointers and out dtypes: the same cuBLASLt algorithms); their contents are
// overwritten by the step. Layer 0 stands for all: every layer's products have its shapes.
// A mixture of experts' router and shared expert likewise (its experts run in the backend's own
// kernels, not these products).
void LlamaModel::warm_up_matmuls(const StepPlan& s) {
  const DType act = backend_.compute_dtype();
  const int64_t hidden = config_.hidden_size, d = config_.head_dim;
  const Layer& L = layers_[0];
  const Layer* dense = nullptr;  // the first layer of each kind
  const Layer* sparse = nullptr;
  for (const Layer& l : layers_) {
    const Layer*& first = l.experts ? sparse : dense;
    if (!first) first = &l;
  }
  for (int64_t n : matmul_token_rows(s)) {
    if (n == 0 || !warm_token_rows_.insert(n).second) continue;
    Tensor h = block_out(n);
    Tensor qkv = scratch(ws_.qkv, act, {n, (hq_ + 2 * hkv_) * d});
    Tensor attn = scratch(ws_.attn, act, {n, hq_ * d});
    backend_.matmul(qkv, h, L.wqkv.tensor);
    backend_.matmul_k_sliced(h, attn, L.wo.tensor, k_slices_);
    if (dense) {
      Tensor gate_up = scratch(ws_.gate_up, act, {n, 2 * inter_});
      Tensor gate = scratch(ws_.gate, act, {n, inter_});
      backend_.matmul(gate_up, h, dense->w_gate_up.tensor);
      backend_.matmul_k_sliced(h, gate, dense->w_down.tensor, k_slices_);
    }
    if (sparse) {
      const int64_t experts = config_.moe.num_experts;
      backend_.matmul(scratch(ws_.router_logits, DType::kF32, {n, experts}), h,
                      sparse->router.tensor);
      if (sparse->shared_gate_up.storage) {
        Tensor gate_up = scratch(ws_.shared_gate_up, act, {n, 2 * shared_inter_});
        Tensor gate = scratch(ws_.shared_act, act, {n, shared_inter_});
        backend_.matmul(gate_up, h, sparse->shared_gate_up.tensor);
        backend_.matmul(scratch(ws_.shared_out, act, {n, hidden}), gate, sparse->shared_down.tensor);
        backend_.matmul(scratch(ws_.shared_logit, DType::kF32, {n, 1}), h,
                        sparse->shared_gate.tensor);
      }
    }
  }
  const Tensor& head = lm_head_.storage ? lm_head_.tensor : embed_.tensor;
  for (int64_t rows : matmul_logit_rows(s)) {
    if (rows == 0 || !warm_logit_rows_.insert(rows).second) continue;
    Tensor sel = scratch(ws_.sel, act, {rows, hidden});
    Tensor out = shard_ ? scratch(ws_.logits_local, DType::kF32, {rows, vocab_})
                        : scratch(ws_.logits, DType::kF32, {rows, int64_t(config_.vocab_size)});
    backend_.matmul(out, sel, head);
  }
  // No synchronize: a library load happens inside the host call, which has returned by now.
}

}  // namespace flashserve
