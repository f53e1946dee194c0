// The 2-D tensor maps (CUtensorMap) that the Hopper kernels' bulk tensor copies (TMA) read
// through, encoded on the host. Included by the sm_90a translation units of this folder only.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only; maps are encoded through the runtime's driver entry point)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"

namespace flashserve::cuda::detail::sm90 {

// A 2-D tensor map for the bulk copies: `rows` rows of `cols` 16-bit elements, `row_stride`
// elements apart, boxes of `box_rows` rows x 64 elements (128 bytes, the swizzle's row), 128-byte
// swizzle, out-of-range elements read as zeros. cuTensorMapEncodeTiled comes through the runtime's
// driver entry point (no -lcuda).
inline CUtensorMap make_tensor_map_2d(const void* base, int64_t cols, int64_t rows, int64_t row_stride,
                                      int box_rows, bool f16) {
  using Encode = PFN_cuTensorMapEncodeTiled_v12000;
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status{};
    CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                &status));
    FS_CHECK(status == cudaDriverEntryPointSuccess && fn != nullptr,
             "cuTensorMapEncodeTiled is not available from the CUDA driver");
    return reinterpret_cast<Encode>(fn);
  }();
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t row_bytes[1] = {cuuint64_t(row_stride) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(&map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                            const_cast<void*>(base), dims, row_bytes, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FS_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed with CUresult ", int(r));
  return map;
}

}  // namespace flashserve::cuda::detail::sm90
