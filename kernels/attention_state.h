// The one place the attention-state merge formula lives (docs/KERNEL_NOTES.md §1.2), shared by the CPU
// reference, the prefill kernel's LSE output and the split-K decode merge.
//
// A state over a set of keys is (o, lse): o is the softmax-normalised output over those keys and
// lse the base-2 log-sum-exp of their scaled logits (see paged_attention.h). Merging states over
// disjoint key sets weighs each by w_s = 2^(lse_s - lse) with lse = log2(sum_s 2^lse_s).
// A state that saw no keys has lse = -inf and weighs exactly zero (never NaN); if every state is
// empty the merged lse is -inf and the merged o is 0. An attention sink (paged_attention.h) is one
// more state, with o = 0 and lse = log2(e) * sink. C++17-clean, callable from device code.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define FS_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FS_HOST_DEVICE inline
#endif

namespace flashserve {

// exp2f/log2f are the float functions on the device and, from <cmath>, on the host too.
FS_HOST_DEVICE float fs_exp2(float x) { return exp2f(x); }
FS_HOST_DEVICE float fs_log2(float x) { return log2f(x); }

// Merged LSE of n states; `lse_of(s)` returns state s's lse. Returns -inf if all are empty.
template <class LseOf>
FS_HOST_DEVICE float merged_lse(int n, LseOf lse_of) {
  float max_lse = -INFINITY;
  for (int s = 0; s < n; ++s) max_lse = fmaxf(max_lse, lse_of(s));
  if (max_lse == -INFINITY) return -INFINITY;  // all empty: avoid (-inf) - (-inf) = NaN
  float sum = 0.f;
  for (int s = 0; s < n; ++s) sum += fs_exp2(lse_of(s) - max_lse);
  return max_lse + fs_log2(sum);
}

// Weight of a state with lse `lse_s` inside a merge whose merged lse is `lse_total`.
FS_HOST_DEVICE float merge_weight(float lse_s, float lse_total) {
  if (lse_s == -INFINITY) return 0.f;  // empty state weighs zero, also when lse_total is -inf
  return fs_exp2(lse_s - lse_total);
}

// A row's lse with its sink: the merge of the row's state over its keys (lse `lse`, -inf if it
// saw none) with the sink's state (lse `sink_log2` = log2(e) * sink, o = 0). The row's output
// becomes its keys' o times merge_weight(lse, lse_with_sink(lse, sink_log2)).
FS_HOST_DEVICE float lse_with_sink(float lse, float sink_log2) {
  return merged_lse(2, [&](int s) { return s == 0 ? lse : sink_log2; });
}

}  // namespace flashserve
