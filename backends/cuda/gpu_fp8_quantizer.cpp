// GpuFp8Quantizer (backends/cuda/gpu_fp8_quantizer.h): the FP8 quantizing kernel's launches at
// load and the deferred read of its non-finite rows.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include "backends/cuda/gpu_fp8_quantizer.h"

#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/fp8_quantize.h"

namespace flashserve {

GpuFp8Quantizer::GpuFp8Quantizer() {
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&bad_row_), sizeof(unsigned)));
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&bad_row_host_), sizeof(unsigned),
                           cudaHostAllocDefault));
  CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
}

GpuFp8Quantizer::~GpuFp8Quantizer() {
  if (copied_) {
    cudaEventSynchronize(copied_);  // the copy may still write bad_row_host_
    cudaEventDestroy(copied_);
  }
  cudaFreeHost(bad_row_host_);
  cudaFree(bad_row_);
}

void GpuFp8Quantizer::quantize(void* codes, float* scales, const void* w, DType dtype,
                               int64_t rows, int64_t cols, cudaStream_t stream) {
  FS_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "the GPU quantizes bf16 and f16 "
           "weights to FP8, not ", dtype_name(dtype));
  check();  // before bad_row_ is reset and bad_row_host_ overwritten
  CUDA_CHECK(cudaMemsetAsync(bad_row_, 0xff, sizeof(unsigned), stream));  // UINT_MAX
  cuda::quantize_weight_fp8(codes, scales, w, dtype == DType::kF16, rows, cols, bad_row_, stream);
  CUDA_CHECK(cudaMemcpyAsync(bad_row_host_, bad_row_, sizeof(unsigned), cudaMemcpyDeviceToHost,
                             stream));
  CUDA_CHECK(cudaEventRecord(copied_, stream));
  pending_ = shape_str({rows, cols});
}

void GpuFp8Quantizer::check() {
  if (pending_.empty()) return;
  CUDA_CHECK(cudaEventSynchronize(copied_));
  const std::string shape = std::move(pending_);
  pending_.clear();
  FS_CHECK(*bad_row_host_ == UINT_MAX, "cannot quantize a projection of shape ", shape,
           " to FP8: row ", *bad_row_host_, " holds a NaN or infinite value");
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
