// Cascade attention on the CPU: gather the prefix rows' queries, run both passes through the plain
// reference with LSE output, merge per (sequence, q head) with kernels/attention_state.h.
#include "kernels/cpu/cascade_attention_ref.h"

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/attention_state.h"
#include "kernels/cpu/paged_attention_ref.h"

namespace flashserve::ref {

template <class T>
void cascade_attention(const CascadeAttentionArgs& c, const T* q, const T* k_cache,
                       const T* v_cache, T* out) {
  const int n = c.step.num_seqs, hq = c.step.num_q_heads, d = c.step.head_dim;
  const size_t row = size_t(hq) * size_t(d);
  FS_CHECK(c.num_parts >= 0 && c.num_prefix_rows >= 0 && c.merge_stride >= 0,
           "cascade: negative sizes");
  std::vector<T> pq(size_t(c.num_prefix_rows) * row), po(pq.size());
  std::vector<T> plse(size_t(c.num_prefix_rows) * size_t(hq));
  for (int r = 0; r < c.num_prefix_rows; ++r) {
    const int b = c.prefix_q_rows[r];
    FS_CHECK(b >= 0 && b < n, "cascade: prefix row ", r, " queries for sequence ", b, " of ", n);
    std::copy_n(q + size_t(b) * row, row, pq.begin() + ptrdiff_t(size_t(r) * row));
  }
  if (c.num_parts > 0)
    paged_attention<T>(cascade_prefix_args(c), pq.data(), k_cache, v_cache, po.data(), plse.data());
  std::vector<T> so(size_t(n) * row), slse(size_t(n) * size_t(hq));
  paged_attention<T>(cascade_suffix_args(c), q, k_cache, v_cache, so.data(), slse.data());

  // State s of (b, h): s == 0 the suffix, s >= 1 the part in merge_rows[b][s - 1].
  std::vector<int32_t> rows;
  for (int b = 0; b < n; ++b) {
    rows.clear();
    for (int s = 0; s < c.merge_stride; ++s) {
      const int32_t r = c.merge_rows[size_t(b) * size_t(c.merge_stride) + size_t(s)];
      if (r < 0) continue;
      FS_CHECK(r < c.num_prefix_rows && c.prefix_q_rows[r] == b, "cascade: merge row ", r,
               " of sequence ", b, " is not one of its prefix rows");
      rows.push_back(r);
    }
    for (int h = 0; h < hq; ++h) {
      const auto lse_of = [&](int s) -> float {
        return s == 0 ? float(slse[size_t(b) * hq + h])
                      : float(plse[size_t(rows[size_t(s - 1)]) * hq + h]);
      };
      const auto o_of = [&](int s) -> const T* {
        return s == 0 ? so.data() + size_t(b) * row + size_t(h) * d
                      : po.data() + size_t(rows[size_t(s - 1)]) * row + size_t(h) * d;
      };
      const int num_states = 1 + int(rows.size());
      const float total = merged_lse(num_states, lse_of);
      T* o = out + size_t(b) * row + size_t(h) * d;
      std::fill(o, o + d, T(0));
      for (int s = 0; s < num_states; ++s) {
        const T w = T(merge_weight(lse_of(s), total));
        if (w == T(0)) continue;  // an empty state: its o is 0 anyway
        const T* x = o_of(s);
        for (int i = 0; i < d; ++i) o[i] += w * x[i];
      }
    }
  }
}

template void cascade_attention<float>(const CascadeAttentionArgs&, const float*, const float*,
                                       const float*, float*);
template void cascade_attention<double>(const CascadeAttentionArgs&, const double*,
                                        const double*, const double*, double*);

}  // namespace flashserve::ref
