// The contract of cascade (shared-prefix) decode attention, shared by the CPU twin
// (kernels/cpu/cascade_attention_ref.h) and the CUDA path (kernels/attention_cascade.h);
// model/cascade_plan.h decides which sequences form groups and fills these arrays.
//
// In a decode step (one query per sequence) where groups of sequences hold the same leading KV
// blocks (the prefix cache shares them), attention runs in three passes instead of one:
//   prefix pass  a group's queries, gathered into one packed "sequence" per part (a slice of the
//                group's shared blocks), attend non-causally to that slice: every shared key
//                precedes every query of the group, so each key block is read once per group
//                instead of once per sequence;
//   suffix pass  each sequence's query attends to its own blocks after the shared ones (the
//                plain decode kernel over a block table that starts there);
//   merge        per (sequence, q head) the suffix state and its parts' states combine by their
//                base-2 LSE (kernels/attention_state.h).
// Each query sees exactly the keys of the plain pass (its shared slices and its suffix, disjoint),
// so the result is the same attention up to rounding. RoPE was applied to q and to the cached
// keys before attention, so positions play no part. Layouts and the LSE base:
// kernels/paged_attention.h. C++17-clean: included by .cu files.
#pragma once

#include <cstdint>

#include "kernels/paged_attention.h"

namespace flashserve {

struct CascadeAttentionArgs {
  // The plain decode step: num_seqs, cu_q_lens (0, 1, .., num_seqs), head counts, head_dim,
  // block_size, scale. Its kv_lens, block_table and max_blocks_per_seq are not read.
  PagedAttentionArgs step;
  // Prefix pass: num_parts packed sequences of prefix rows (part p owns rows
  // part_cu_rows[p] .. part_cu_rows[p+1]-1), each over part_kv_lens[p] keys of its own table.
  int num_parts = 0;
  int num_prefix_rows = 0;
  const int32_t* part_cu_rows = nullptr;      // [num_parts + 1]
  const int32_t* part_kv_lens = nullptr;      // [num_parts]
  const int32_t* part_block_table = nullptr;  // [num_parts, part_stride]
  int part_stride = 0;
  const int32_t* prefix_q_rows = nullptr;     // [num_prefix_rows] the sequence each row queries for
  // Suffix pass: sequence b over suffix_kv_lens[b] keys (kv_len 0: no suffix state).
  const int32_t* suffix_kv_lens = nullptr;      // [num_seqs]
  const int32_t* suffix_block_table = nullptr;  // [num_seqs, suffix_stride]
  int suffix_stride = 0;
  // Merge: the prefix rows holding sequence b's part states, -1 where it has fewer parts.
  const int32_t* merge_rows = nullptr;  // [num_seqs, merge_stride]
  int merge_stride = 0;
};

// The prefix pass as a plain paged-attention call over the gathered queries (non-causal).
inline PagedAttentionArgs cascade_prefix_args(const CascadeAttentionArgs& c) {
  PagedAttentionArgs a = c.step;
  a.num_seqs = c.num_parts;
  a.cu_q_lens = c.part_cu_rows;
  a.kv_lens = c.part_kv_lens;
  a.block_table = c.part_block_table;
  a.max_blocks_per_seq = c.part_stride;
  a.causal = false;
  return a;
}

// The suffix pass as a plain decode call (one query per sequence, at the end of its keys).
inline PagedAttentionArgs cascade_suffix_args(const CascadeAttentionArgs& c) {
  PagedAttentionArgs a = c.step;
  a.kv_lens = c.suffix_kv_lens;
  a.block_table = c.suffix_block_table;
  a.max_blocks_per_seq = c.suffix_stride;
  return a;
}

}  // namespace flashserve
