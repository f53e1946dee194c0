// Cascade plan: which sequences of a decode step share leading KV blocks, and the arrays of
// kernels/cascade_attention.h that make attention read those blocks once per group instead of
// once per sequence. Plain C++ from the laid-out StepPlan (model/step.h), no device calls; the
// model uploads the arrays with the step's other metadata (docs/PREFIX_CACHE.md, "Cascade").
//
// Sharing is read off the block tables: the prefix cache hands every sequence with the same
// prefix the same physical blocks, so sequences whose tables start with the same block ids hold
// the same keys there. Groups: sequences bucketed by their first block, each bucket's shared
// prefix the longest run of equal ids over all its members (never the block holding a member's
// last key, which it writes this step); a bucket whose prefix is too short to pay splits by the
// block where its members part, and its sub-buckets are tried in turn (one level of sharing per
// sequence: no nested cascades). A group pays when it saves at least min_saved_bytes of K/V reads
// per layer: (members - 1) * shared tokens * kv_bytes_per_token.
#pragma once

#include <cstdint>
#include <vector>

#include "model/step.h"

namespace flashserve {

struct CascadeConfig {
  bool enabled = false;
  int min_group_size = 2;
  // K/V bytes of one token in one layer (2 * kv heads * head_dim * element size; the model sets
  // it), and the reads per layer a group must save to pay. Measured on an H100 (TinyLlama's
  // shape, docs/PREFIX_CACHE.md): the cascade's launches cost 14-25 us per layer more than plain
  // decode, which reads shared blocks (L2-resident) at ~6.4 GB per ms, so below ~100-160 MB of
  // saved reads per layer cascade is slower. 160 MiB is the break-even estimate, not yet measured
  // at a shape where cascade wins.
  int64_t kv_bytes_per_token = 0;
  int64_t min_saved_bytes = int64_t(160) << 20;
  // Shared blocks per part (one packed sequence of the prefix pass): parts are what the prefix
  // pass spreads over the GPU, so a long prefix is cut into several.
  int part_blocks = 8;
  // A group's query rows in each part are padded to a multiple of this (padding rows repeat a
  // member's query and are never merged), so a recorded CUDA graph serves a group that grew or
  // shrank by a few sequences.
  int row_multiple = 16;
};

class CascadePlan {
 public:
  // Plans `step` (laid out by StepPlan::lay_out) with `block_size`-token blocks: active only for
  // a pure decode step with at least one group that pays; otherwise empty.
  void build(const StepPlan& step, int block_size, const CascadeConfig& config);
  bool active() const { return num_parts > 0; }
  // Everything a launch derives from host data besides the step's own shape (a graph key).
  uint64_t shape_key() const;

  struct Group {
    std::vector<int> members;  // step sequence indices, ascending
    int shared_blocks = 0;
  };
  std::vector<Group> groups;
  // The arrays of kernels/cascade_attention.h (shapes there), and their strides.
  int num_parts = 0, num_prefix_rows = 0, part_stride = 0, suffix_stride = 0, merge_stride = 0;
  std::vector<int32_t> part_cu_rows, part_kv_lens, part_block_table, prefix_q_rows;
  std::vector<int32_t> suffix_kv_lens, suffix_block_table, merge_rows;

 private:
  void find_groups(const StepPlan& step, int block_size, const CascadeConfig& config);
  void split(const StepPlan& step, int block_size, const CascadeConfig& config,
             std::vector<int> bucket, int depth);
  void fill_arrays(const StepPlan& step, int block_size, const CascadeConfig& config);
  void clear();
  std::vector<int> shareable_;  // [num_seqs] full blocks before the one holding the last key
};

}  // namespace flashserve
