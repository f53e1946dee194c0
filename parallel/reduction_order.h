// The one order in which tensor parallelism's partial sums are added, where the order is fixed
// (the CPU backend and the stand-in communicator): terms [a, b) sum as [a, mid) + [mid, b) with
// mid = a + (b - a) / 2, recursively; one term is itself. So four terms add as
// (t0 + t1) + (t2 + t3), and a rank that adds its own two k-slices before the all-reduce adds
// the rest gives the same bits as one process adding all four (docs/TENSOR_PARALLEL.md).
// C++17-clean, header-only.
#pragma once

namespace flashserve {

// term(i) for i in [begin, end), end > begin, added in the pairwise order above.
template <class T, class Term>
T pairwise_sum(int begin, int end, const Term& term) {
  if (end - begin == 1) return term(begin);
  const int mid = begin + (end - begin) / 2;
  const T left = pairwise_sum<T>(begin, mid, term);
  return left + pairwise_sum<T>(mid, end, term);
}

}  // namespace flashserve
