// Row copies (kernels/embedding_gather.h): the embedding lookup and the gather of selected rows
// (the logit rows of a step). One thread per element or byte; the CPU twins are
// kernels/cpu/embedding_gather_ref.h.
#include <cuda_bf16.h>

#include "core/error.h"
#include "kernels/cuda/block_util.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/embedding_gather.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::blocks_for;

constexpr int kThreads = 256;

__global__ void embedding_kernel(bf16* out, const int32_t* ids, const bf16* table, int n,
                                 int hidden, int vocab) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * hidden) return;
  const int t = int(i / hidden), c = int(i % hidden);
  const int id = ids[t];
  // Token ids are validated on the host (ModelRunner); a bad one here is a bug: write zeros.
  out[i] = (id >= 0 && id < vocab) ? table[int64_t(id) * hidden + c] : __float2bfloat16(0.f);
}

__global__ void gather_rows_kernel(char* out, const char* x, const int32_t* row_ids, int rows,
                                   int row_bytes) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(rows) * row_bytes) return;
  const int r = int(i / row_bytes), c = int(i % row_bytes);
  out[i] = x[int64_t(row_ids[r]) * row_bytes + c];
}

}  // namespace

void embedding_bf16(void* out, const int32_t* ids, const void* table, int n, int hidden,
                    int vocab, cudaStream_t stream) {
  const int64_t total = int64_t(n) * hidden;
  if (total == 0) return;
  embedding_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), ids, static_cast<const bf16*>(table), n, hidden, vocab);
  CUDA_CHECK_LAUNCH();
}

void gather_rows(void* out, const void* x, const int32_t* row_ids, int rows, int row_bytes,
                 cudaStream_t stream) {
  const int64_t total = int64_t(rows) * row_bytes;
  if (total == 0) return;
  gather_rows_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<char*>(out), static_cast<const char*>(x), row_ids, rows, row_bytes);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda
