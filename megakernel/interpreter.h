// The megakernel's CPU twin: runs a lowered decode step (megakernel/lower.h) instruction by
// instruction through run_queues, with f32 weights, f32 KV cache and the kernel's math (norms
// folded into the projections as a per-row scale, split attention merged by the last split).
// It proves the lowering complete: its logits equal the CPU model forward's.
#pragma once

#include <cstdint>
#include <vector>

#include "megakernel/instructions.h"

namespace flashserve {

// One layer's f32 weights (HF shapes, kernels/megakernel.h's MegaLayerPtrs in f32) and its
// KV cache [num_blocks, block_size, num_kv_heads, head_dim].
struct MegaCpuLayer {
  const float* input_norm = nullptr;  // [hidden_size]
  const float* wqkv = nullptr;        // [(hq + 2 hkv) head_dim, hidden_size]
  const float* bqkv = nullptr;        // [(hq + 2 hkv) head_dim] or null
  const float* q_norm = nullptr;      // [head_dim] or null
  const float* k_norm = nullptr;      // [head_dim] or null
  const float* wo = nullptr;          // [hidden_size, hq head_dim]
  const float* post_norm = nullptr;   // [hidden_size]
  const float* w_gate_up = nullptr;   // [2 intermediate_size, hidden_size]
  const float* w_down = nullptr;      // [hidden_size, intermediate_size]
  float* k_cache = nullptr;           // [num_blocks, block_size, hkv, head_dim]
  float* v_cache = nullptr;           // [num_blocks, block_size, hkv, head_dim]
};

struct MegaCpuModel {
  std::vector<MegaCpuLayer> layers;
  const float* embed = nullptr;       // [vocab_size, hidden_size]
  const float* final_norm = nullptr;  // [hidden_size]
  const float* lm_head = nullptr;     // [vocab_size, hidden_size] (the embedding when tied)
  const float* inv_freq = nullptr;    // [head_dim / 2]
};

// A decode step's inputs: one new token per sequence.
struct MegaCpuStep {
  const int32_t* tokens = nullptr;       // [batch]
  const int32_t* positions = nullptr;    // [batch]
  const int32_t* slots = nullptr;        // [batch], -1: no KV write
  const int32_t* kv_lens = nullptr;      // [batch] keys including the new one
  const int32_t* block_table = nullptr;  // [batch, max_blocks_per_seq]
  int max_blocks_per_seq = 0, block_size = 0;
};

// Runs `p` and returns the logits [batch, vocab_size]; writes the new K/V into the caches.
std::vector<float> interpret_decode_step(const MegaProgram& p, const MegaCpuModel& m,
                                         const MegaCpuStep& s);

}  // namespace flashserve
