// Host launcher of the GPU argmax over logits rows (kernels/cuda/argmax.cu), the greedy token
// choice; CPU twin in kernels/cpu/argmax_ref.h. The launcher checks the launch and throws
// flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// ids[r] = argmax of row r (ties to the lowest index), -1 if the row holds a NaN.
void argmax_rows_f32(int32_t* ids,          // [rows]
                     const float* logits,   // [rows, cols]
                     int rows, int cols, cudaStream_t stream);

}  // namespace flashserve::cuda
