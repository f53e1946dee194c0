// CPU reference twin of the GPU argmax (kernels/argmax.h): the host sampler's greedy choice. It
// is the CPU backend's argmax_rows and the oracle the CUDA kernel is tested against
// (tests/kernels/test_argmax.cpp). All pointers are host pointers.
#pragma once

#include <cstdint>

namespace flashserve::ref {

// ids[r] = the index of row r's largest value, ties to the lowest index; -1 if the row holds
// a NaN.
void argmax_rows(int32_t* ids,         // [rows]
                 const float* logits,  // [rows, cols]
                 int64_t rows, int64_t cols);

}  // namespace flashserve::ref
