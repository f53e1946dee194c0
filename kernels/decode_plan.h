// Host-side plan for split-K decode attention (docs/KERNEL_NOTES.md §3.3): how many splits each sequence's
// KV range is cut into and how long a split (chunk) is. Plain C++, no device memory; computed once
// per decode step from the host copy of kv_lens and reused by every layer.
#pragma once

#include <cstdint>

namespace flashserve {

// The decode kernels launch num_seqs x num_kv_heads x num_splits thread blocks. A sequence's
// query reads keys [start, kv_len): start = 0, or kv_len - window with a sliding window (see
// decode_span). Split s covers keys [start + s * chunk_len, start + (s + 1) * chunk_len), the last
// split (s == num_splits - 1) everything from there to kv_len, so a plan made for shorter
// sequences stays correct (only slower). Splits that start at or past kv_len are empty and weigh
// zero in the merge.
struct DecodePlan {
  int num_splits = 1;  // splits of the longest sequence; 1 means no merge kernel
  int chunk_len = 0;   // keys per split, a multiple of block_size and of tile_len
  int kv_heads_per_block = 0;  // kv heads one partial block serves (the block count the split count
                               // was planned for); 0 = the kernel's default. Set by
                               // cuda::plan_attention_decode; plan_decode leaves it 0
};

// What the plan needs to know about the GPU and the kernel.
struct DecodePlanConfig {
  int num_sms = 132;         // cudaDevAttrMultiProcessorCount
  int ctas_per_sm = 2;       // resident decode thread blocks per SM (occupancy of the partial kernel)
  int min_chunk_len = 64;    // one tile. Partials cost 2 * group * 4 B per head_dim element per split
                            // (fp32 write + read) vs 4 B per key and element of K/V: ~12% at 64 keys,
                            // G = 4; only small, latency-bound batches split that finely, where the
                            // merge's fixed cost matters, not its bytes (v3: 128 -> 64 once the merge
                            // stopped paying per split; the bench times 128 alongside)
  int max_splits = 128;
  int tile_len = 64;         // keys per kernel tile: chunks are whole tiles
  double fill_fraction = 0.8;  // no split once the batch alone fills this fraction of the slots
  double eff_fraction = 0.85;  // take the fewest splits within this fraction of the best wave efficiency
  int kv_heads_per_block = 0;  // cuda::plan_attention_decode only: 1 forces one kv head per partial
                               // block at head_dim 64 (else heads pair when they can); plan_decode
                               // ignores it (its num_kv_heads already counts blocks)
};

// Keys the decode query of a sequence of kv_len reads: its last `window` (0: all of them).
inline int decode_span(int kv_len, int window) {
  return window > 0 && kv_len > window ? window : kv_len;
}

// Chooses the plan for a batch; kv_lens is a host array [num_seqs]. num_kv_heads counts thread
// blocks per (sequence, split): the kv heads, divided by the heads one block serves
// (cuda::plan_attention_decode in kernels/attention_decode.h fills everything in for the GPU).
// window: the layer's sliding window (0 = full attention); the splits cut each sequence's
// decode_span, so a windowed layer plans window-sized work however long the context.
DecodePlan plan_decode(const int32_t* kv_lens,  // [num_seqs]
                       int num_seqs, int num_kv_heads, int block_size,
                       const DecodePlanConfig& config = DecodePlanConfig(), int window = 0);

// A plan with exactly num_splits splits over max_kv_len keys (tests and benchmarks force this;
// for a windowed layer, max_kv_len is the longest decode_span).
DecodePlan plan_decode_fixed(int max_kv_len, int num_splits, int block_size, int tile_len = 64);

}  // namespace flashserve
