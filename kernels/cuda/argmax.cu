// Greedy token choice on the GPU (kernels/argmax.h): the argmax of each logits row, one block
// per row; the CPU twin is kernels/cpu/argmax_ref.h.
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/argmax.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;

// One block per row: each thread scans a strided slice keeping (value, index), then the block
// reduces; a larger value wins, equal values go to the lower index. Any NaN marks the row.
__global__ void argmax_rows_kernel(int32_t* ids, const float* logits, int cols) {
  const float* row = logits + int64_t(blockIdx.x) * cols;
  float best = -FLT_MAX;
  int idx = INT_MAX;
  bool nan = false;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = row[c];
    nan |= v != v;
    if (v > best || idx == INT_MAX) best = v, idx = c;  // c rises: ties keep the first
  }
  __shared__ float s_val[1024];
  __shared__ int s_idx[1024];
  __shared__ int s_nan;
  if (threadIdx.x == 0) s_nan = 0;
  __syncthreads();
  if (nan) s_nan = 1;
  s_val[threadIdx.x] = best;
  s_idx[threadIdx.x] = idx;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float v = s_val[threadIdx.x + half];
      const int i = s_idx[threadIdx.x + half];
      if (v > s_val[threadIdx.x] || (v == s_val[threadIdx.x] && i < s_idx[threadIdx.x]))
        s_val[threadIdx.x] = v, s_idx[threadIdx.x] = i;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = s_nan || s_idx[0] == INT_MAX ? -1 : s_idx[0];
}

}  // namespace

void argmax_rows_f32(int32_t* ids, const float* logits, int rows, int cols, cudaStream_t stream) {
  if (rows == 0) return;
  FS_CHECK(cols > 0, "argmax_rows: no columns");
  argmax_rows_kernel<<<rows, 512, 0, stream>>>(ids, logits, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda
