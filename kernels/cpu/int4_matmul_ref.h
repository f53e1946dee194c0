// CPU reference twin of the int4 weight-only matmul (W4A16) over the internal int4 layout
// (weights/int4_weights.h, docs/QUANTIZATION.md), written for obviousness: the activations are
// gathered once into the weight's column order (act-order), then plain loops with double
// accumulation. The GPU kernels to come are checked against it. All pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// out = x · Wᵀ with W[j, perm[c]] = (code(j, c) - zeros[j, c / group_size]) * scales[j, ...],
// code(j, c) the low nibble of packed[j, c / 2] for even c, the high one for odd c.
void matmul_int4(float* out,             // [m, n]
                 const float* x,         // [m, k]
                 const uint8_t* packed,  // [n, k / 2]
                 const float* scales,    // [n, k / group_size]
                 const uint8_t* zeros,   // [n, k / group_size]
                 const int32_t* perm,    // [k], or null for the identity
                 int m, int n, int k, int group_size);

}  // namespace flashserve::ref
