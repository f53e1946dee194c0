// Entry point of the Hopper grouped-GEMM kernel's translation unit (moe_grouped_gemm_sm90.cu),
// built, and FLASHSERVE_SM90_KERNELS defined for the launcher, only when sm_90a is among the CUDA
// architectures; kernels/cuda/moe_grouped_gemm.cu calls it on compute capability 9.0 only, with
// arguments it has validated.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda::detail {

// tile_128x256: the 128 x 256 tile (else 64 x 256); docs/MOE_GROUPED_GEMM.md. num_sms: the
// persistent grid's size bound.
void run_moe_grouped_gemm_sm90(bool tile_128x256, void* out, const void* a, const int32_t* offsets,
                               const void* w, int num_experts, int n, int k, int max_rows, int num_sms,
                               cudaStream_t stream);

}  // namespace flashserve::cuda::detail
