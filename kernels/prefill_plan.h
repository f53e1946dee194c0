// Host-side choice for the Hopper prefill kernel's contiguous K/V path (docs/PREFILL_ATTENTION.md):
// whether handing it this step's own K/V rows pays. Plain C++, from the host copies of the
// step's lengths.
#pragma once

#include <cstdint>

namespace flashserve {

// A fresh sequence (q_len == kv_len: no cached prefix) of at least `min_fresh_len` tokens runs its
// full 128-key tiles from the step's own rows, ~1.5x faster on the H100; every other
// sequence of that launch (chunked continuations, short prompts) runs the contiguous
// configuration's gather path, which ran ~1.3x slower than the default kernel (chunked
// q512/kv8192: 239 vs 180 us). The two balance near half of the work: the path pays when the
// fresh sequences' tokens are at least half of the step's.
//   cu_q_lens: [num_seqs + 1] prefix sums of q_len (host); kv_lens: [num_seqs] (host)
bool prefill_fresh_kv_pays(const int32_t* cu_q_lens, const int32_t* kv_lens, int num_seqs,
                           int min_fresh_len = 128);

}  // namespace flashserve
