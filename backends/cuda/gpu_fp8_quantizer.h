// GpuFp8Quantizer: --quantize fp8 on the GPU at load (docs/FP8.md). A projection marked
// TensorView::to_fp8 goes up as stored and cuda::quantize_weight_fp8 (kernels/fp8_quantize.h)
// turns it into E4M3 codes and row scales, bit for bit those of the host's quantize_fp8_rows.
// A non-finite weight is a load error, as on the host; its row is read back when the next
// weight is quantized, not at once, so the host stages that weight while this one's last chunk
// and kernel finish, and check() reads the last one. CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace flashserve {

class GpuFp8Quantizer {
 public:
  GpuFp8Quantizer();
  ~GpuFp8Quantizer();
  GpuFp8Quantizer(const GpuFp8Quantizer&) = delete;
  GpuFp8Quantizer& operator=(const GpuFp8Quantizer&) = delete;

  // Queues codes and scales of w on `stream`, after checking the weight quantized before it.
  void quantize(void* codes,     // [rows, cols] E4M3, device
                float* scales,   // [rows] device
                const void* w,   // [rows, cols] `dtype` (bf16 or f16), device
                DType dtype, int64_t rows, int64_t cols, cudaStream_t stream);
  // Throws flashserve::Error if the last weight quantized held a non-finite value (waits for it).
  void check();

 private:
  unsigned* bad_row_ = nullptr;       // [1] device: its first non-finite row, UINT_MAX if none
  unsigned* bad_row_host_ = nullptr;  // [1] pinned: bad_row_ copied back
  cudaEvent_t copied_ = nullptr;      // bad_row_host_ holds the last weight's row
  std::string pending_;               // that weight's shape, until check() has read it
};

}  // namespace flashserve
