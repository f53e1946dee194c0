// Entry points of the grouped GEMM's kernels, called by kernels/cuda/moe_grouped_gemm.cu with
// arguments it has validated: the Hopper kernel (sm90/moe_grouped_gemm_sm90.cu, built, and
// FLASHSERVE_SM90_KERNELS defined for the launcher, only when sm_90a is among the CUDA
// architectures; run on compute capability 9.0) and the mma.sync kernel (moe_grouped_gemm_mma.cu,
// any sm_80+ GPU). docs/MOE_GROUPED_GEMM.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda::detail {

// tile_128x256: the 128 x 256 tile (else 64 x 256). num_sms: the persistent grid's size bound.
void run_moe_grouped_gemm_sm90(bool tile_128x256, void* out, const void* a, const int32_t* offsets,
                               const void* w, int num_experts, int n, int k, int max_rows, int num_sms,
                               cudaStream_t stream);

// The 128 x 128 mma.sync kernel; num_sms as above.
void run_moe_grouped_gemm_mma(void* out, const void* a, const int32_t* offsets, const void* w, int num_experts,
                              int n, int k, int max_rows, int num_sms, cudaStream_t stream);

}  // namespace flashserve::cuda::detail
