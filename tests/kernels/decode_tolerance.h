// The one table of error thresholds for the decode attention GPU tests, with the reasons.
// The kernel sees exactly the 16-bit inputs the double reference sees, so every error comes from
// (a) P rounded to 16 bits before the P.V mma, (b) the output rounded once to 16 bits and
// (c) fp32 accumulation / ex2.approx (relative ~1e-6, negligible). bf16 unit roundoff u = 2^-8,
// fp16 u = 2^-11 (8x tighter).
#pragma once

#include "core/dtype.h"

namespace flashserve::test {

struct DecodeTolerance {
  double frob_rel;      // ||O - O_ref||_F / ||O_ref||_F: rounding averages to ~u/2 per element
  double max_abs_frac;  // max |O - O_ref| / max |O_ref|: one rounding of O (u/2 of the largest
                        // element) plus P's rounding (<= u/2 of the V row it weights), with 2x slack
  double lse_abs;       // |lse - lse_ref| (base 2): fp32 logits and sums, no 16-bit rounding on it
};

inline DecodeTolerance decode_tolerance(DType t) {
  // docs/KERNEL_NOTES.md §4: bf16 relative Frobenius <= 1e-2 (typically 2-4e-3), floor 1e-2 * max|O_ref|.
  if (t == DType::kBF16) return {1e-2, 2e-2, 2e-3};
  return {2e-3, 4e-3, 2e-3};  // fp16: 8x smaller u; kept at ~1/5 of bf16 to leave slack
}

// Merge kernel alone: fp32 partials, fp32 weights; only the output rounding to 16 bits remains.
inline double merge_max_abs_frac(DType t) { return t == DType::kBF16 ? 8e-3 : 1e-3; }
// Below fp16's smallest normal (6.1e-5) its spacing is fixed at 2^-24, so a tiny output rounds by
// up to 2^-25 whatever its size: the relative bound above is floored at that step.
inline double merge_abs_floor(DType t) { return t == DType::kF16 ? 0x1p-24 : 0.0; }
constexpr double kMergeLseAbs = 1e-4;  // fp32 log2/exp2 of values up to |lse| ~ 1e3 (rel 1e-7)

}  // namespace flashserve::test
