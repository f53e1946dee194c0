// Which slice of a Llama-family model one tensor-parallel rank holds (Megatron-style), as plain
// numbers: column-parallel q/k/v and gate/up (each rank computes some of the heads / some of the
// intermediate columns), row-parallel o and down (each rank adds a partial sum over its own
// columns: one all-reduce each per layer; a mixture of experts' experts each split so, the
// layer's experts summed by the same one all-reduce), KV heads split across ranks or, when there are fewer
// KV heads than ranks, each replicated on size / num_kv_heads ranks; the vocabulary projection
// split by rows (a gather before sampling); embedding and norms whole on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weights/loaded_model.h"

namespace flashserve {

class Communicator;

struct ShardPlan {
  int size = 1, rank = 0;  // tensor_parallel_size, this rank
  int q_heads = 0, q_head0 = 0;    // query heads [q_head0, q_head0 + q_heads)
  int kv_heads = 0, kv_head0 = 0;  // KV heads [kv_head0, kv_head0 + kv_heads)
  int64_t inter = 0, inter0 = 0;   // intermediate columns [inter0, inter0 + inter)
  int64_t vocab = 0, vocab0 = 0;   // vocabulary rows [vocab0, vocab0 + vocab)
  // Mixture of experts: every routed expert's intermediate columns [moe_inter0, + moe_inter) and
  // the shared expert's [shared_inter0, + shared_inter), cut as a dense MLP's.
  int64_t moe_inter = 0, moe_inter0 = 0;
  int64_t shared_inter = 0, shared_inter0 = 0;
  // k-slices of each row-parallel product on this rank (row_parallel_slices() / size).
  int k_slices = 1;
};

// A rank's slice and its handle on the group (LlamaModel's tensor-parallel mode).
struct TensorShard {
  ShardPlan plan;
  Communicator* comm = nullptr;
};

// Throws flashserve::Error naming the model size that `size` does not divide (checked once, at
// start-up, before anything is loaded).
void check_tensor_parallel(const ModelConfig& c, int size);

// How many equal k-slices the row-parallel products (o_proj: k = num_q_heads * head_dim;
// down_proj: k = intermediate_size) are cut into over all ranks together, each slice's partial
// product computed alone and the slices added in reduction_order.h's order: kRowParallelSlices
// when `size` divides it and both k's divide by it, else `size`. Where the order is fixed (CPU),
// results are then the same bits for every size that divides kRowParallelSlices, no tensor
// parallelism (size 1) included.
constexpr int kRowParallelSlices = 4;
int row_parallel_slices(const ModelConfig& c, int size);

ShardPlan make_shard_plan(const ModelConfig& c, int size, int rank);

// How a named weight (weights/model.h's names) is cut for a rank: whole, a range of its rows
// (dim 0), or a range of its columns (dim 1).
struct WeightSplit {
  enum class Kind { kWhole, kRows, kColumns } kind = Kind::kWhole;
  int64_t begin = 0, count = 0;
};
WeightSplit weight_split(const ShardPlan& p, const ModelConfig& c, const std::string& name);

// `full` cut by `split`. Rows are a view into the same memory (a memory-mapped file: only those
// bytes are ever read); columns are copied into `storage`, which must outlive the view. A packed
// weight (int4, block-FP8) is cut packed, owning its copy, where the cut keeps its packing
// (parallel/packed_slice.h); else it is dequantized to f32 and its slice copied into `storage`.
TensorView slice_weight(const TensorView& full, const WeightSplit& split,
                        std::vector<char>& storage);

}  // namespace flashserve
