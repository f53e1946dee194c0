// Two passes per query row over the keys it sees (causal, sliding window): max of the scores
// (soft-capped when asked), then the exp-sum and the weighted sum of V.
#include "kernels/cpu/paged_attention_ref.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace flashserve::ref {

template <class T>
void paged_attention(const PagedAttentionArgs& a, const T* q, const T* k_cache, const T* v_cache,
                     T* out, T* lse) {
  FS_CHECK(a.num_kv_heads > 0 && a.num_q_heads % a.num_kv_heads == 0, "num_q_heads ",
           a.num_q_heads, " not a multiple of num_kv_heads ", a.num_kv_heads);
  FS_CHECK(a.block_size > 0 && a.head_dim > 0, "bad block_size/head_dim");
  FS_CHECK(a.window >= 0 && a.softcap >= 0.f, "bad window ", a.window, " or softcap ", a.softcap);
  const int d = a.head_dim;
  const int group = a.num_q_heads / a.num_kv_heads;
  const T log2e = T(1.4426950408889634);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  std::vector<T> logits;

  // Address of token t's row for kv head h of sequence b.
  auto kv_row = [&](const T* cache, int b, int t, int h) {
    int block = a.block_table[size_t(b) * a.max_blocks_per_seq + t / a.block_size];
    size_t row = (size_t(block) * a.block_size + t % a.block_size) * a.num_kv_heads + h;
    return cache + row * d;
  };

  for (int b = 0; b < a.num_seqs; ++b) {
    const int q_begin = a.cu_q_lens[b];
    const int q_len = a.cu_q_lens[b + 1] - q_begin;
    const int kv_len = a.kv_lens[b];
    FS_CHECK(q_len >= 0 && kv_len >= 0, "negative length in sequence ", b);
    FS_CHECK(kv_len <= a.max_blocks_per_seq * a.block_size, "kv_len ", kv_len,
             " exceeds the block table of sequence ", b);
    for (int i = 0; i < q_len; ++i) {
      // Keys visible to this row: [first, visible). All of them, or up to its position when
      // causal, and from its window's start when windowed.
      const int pos = kv_len - q_len + i;
      int visible = a.causal ? pos + 1 : kv_len;
      if (visible > kv_len) visible = kv_len;
      if (visible < 0) visible = 0;
      int first = a.window > 0 ? pos - a.window + 1 : 0;
      if (first < 0) first = 0;
      if (first > visible) first = visible;
      const int count = visible - first;
      for (int h = 0; h < a.num_q_heads; ++h) {
        const int kvh = h / group;
        const size_t row = size_t(q_begin + i) * a.num_q_heads + h;
        const T* qr = q + row * d;
        T* o = out + row * d;
        logits.assign(count, T(0));
        T m = neg_inf;
        for (int t = 0; t < count; ++t) {
          const T* k = kv_row(k_cache, b, first + t, kvh);
          T dot = 0;
          for (int c = 0; c < d; ++c) dot += qr[c] * k[c];
          logits[t] = a.softcap > 0.f ? T(a.softcap) * std::tanh(dot * T(a.scale) / T(a.softcap)) * log2e
                                      : dot * T(a.scale) * log2e;  // base-2 score
          if (logits[t] > m) m = logits[t];
        }
        // A sink logit (natural-log units) joins the denominator once and adds no value.
        const T sink = a.sinks ? T(a.sinks[h]) * log2e : neg_inf;
        if (sink > m) m = sink;
        for (int c = 0; c < d; ++c) o[c] = 0;
        if (count == 0) {  // no key: out = 0, lse = -inf (the contract in paged_attention.h)
          if (lse) lse[row] = neg_inf;
          continue;
        }
        T sum = a.sinks ? std::exp2(sink - m) : T(0);
        for (int t = 0; t < count; ++t) {
          const T p = std::exp2(logits[t] - m);
          sum += p;
          const T* v = kv_row(v_cache, b, first + t, kvh);
          for (int c = 0; c < d; ++c) o[c] += p * v[c];
        }
        for (int c = 0; c < d; ++c) o[c] /= sum;
        if (lse) lse[row] = m + std::log2(sum);
      }
    }
  }
}

template void paged_attention<float>(const PagedAttentionArgs&, const float*, const float*,
                                     const float*, float*, float*);
template void paged_attention<double>(const PagedAttentionArgs&, const double*, const double*,
                                      const double*, double*, double*);

}  // namespace flashserve::ref
