// The CUDA int4 layout (kernels/int4_gemv.h) made on the GPU straight from a checkpoint's words
// (weights/int4_packing.h): the CUDA backend uploads qweight / weight_packed as stored and runs
// this, so a load reads each byte once and the host never repacks. The CPU twin is
// int4_gpu_layout over the unpacked internal form (weights/int4_weights.h: unpack_int4);
// tests/kernels/test_int4_layout.cpp compares them. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "weights/int4_packing.h"

namespace flashserve::cuda {

// codes = the int4_gemv.h codes of the n rows that `words` holds: packed column j of row o is
// input column perm[j] (perm null: j) of that row. Every byte of the rows is written (the last
// 128-column unit padded with code 0). Throws unless k % 8 == 0 (and n % 8 == 0 for kGptq and
// kAwq, which pack along the rows).
void int4_layout_codes(uint8_t* codes,         // [n, int4_row_bytes(k)], 16-byte aligned
                       const uint32_t* words,  // [n * k / 8] in `packing`'s order
                       Int4Packing packing,
                       const int32_t* perm,    // [k] or null
                       int n, int k, cudaStream_t stream);

}  // namespace flashserve::cuda
