// Host launcher of the mixture-of-experts grouped GEMM (kernels/cuda/moe_grouped_gemm.cu): every
// expert's rows times that expert's weights in one launch, for prefill and large batches, after
// the tokens have been grouped by expert. The row ranges are read on the device, so the launch
// has no data-dependent shape and is safe to capture in a CUDA graph. CPU twin:
// kernels/cpu/moe_grouped_gemm_ref.h; design and measurements: docs/MOE_GROUPED_GEMM.md.
// C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace flashserve::cuda {

// The most experts one call takes (the kernel keeps each expert's tile range in shared memory).
constexpr int kMoeGroupedGemmMaxExperts = 512;

// out rows [offsets[e], offsets[e+1]) = a rows [offsets[e], offsets[e+1]) · w[e]ᵀ, bf16 in/out,
// f32 accumulation. offsets live on the device (graph-safe: never read on the host); max_rows
// bounds offsets[E]. Rows of out outside every expert's range are not written. Offsets that are
// not non-decreasing within [0, max_rows] are clamped into it on the device (a wrong result, never
// an access out of bounds).
// Requirements (a clear error otherwise): a compute capability 8.0+ GPU (the Hopper kernel on 9.0
// with an sm_90a build, the mma.sync kernel elsewhere), 1 <= num_experts <=
// kMoeGroupedGemmMaxExperts, n and k positive multiples of 8, max_rows >= 0, out, a and w 16-byte
// aligned (all but offsets may be null when max_rows is 0). Bitwise-repeatable (no atomics).
void moe_grouped_gemm(void* out,               // [max_rows, n] bf16
                      const void* a,           // [max_rows, k] bf16
                      const int32_t* offsets,  // [num_experts + 1] device
                      const void* w,           // [num_experts, n, k] bf16 stacked
                      int num_experts, int n, int k, int max_rows, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream);

// Bytes of workspace moe_grouped_gemm needs: 0, the tile schedule is built in shared memory (the
// arguments are there so that a kernel that needs one keeps the callers as they are).
size_t moe_grouped_gemm_workspace(int num_experts, int n, int k, int max_rows);

// The kernels' tile configurations, for the benchmark and the tests (moe_grouped_gemm picks one
// from the GPU and the mean rows per expert, max_rows / num_experts):
//   k128x256:    Hopper kernel, 128 rows x 256 columns, two consumer warpgroups of 64 rows each;
//   k64x256:     Hopper kernel, 64 rows x 256 columns, two consumer warpgroups of 128 columns
//                each (less padding when experts get few rows);
//   k128x128Mma: the mma.sync kernel, 128 x 128 (any compute capability 8.0+ GPU: what runs on
//                GPUs other than Hopper, or without an sm_90a build).
enum class MoeGemmTile { kAuto, k128x256, k64x256, k128x128Mma };
const char* moe_gemm_tile_name(MoeGemmTile tile);

// The tile moe_grouped_gemm runs for this many experts and rows on the current device.
MoeGemmTile moe_grouped_gemm_auto_tile(int num_experts, int max_rows);

// moe_grouped_gemm with the tile configuration forced (kAuto: the launcher's choice); a Hopper
// tile on another GPU or build is an error.
void moe_grouped_gemm_tile(MoeGemmTile tile, void* out, const void* a, const int32_t* offsets,
                           const void* w, int num_experts, int n, int k, int max_rows,
                           cudaStream_t stream);

}  // namespace flashserve::cuda
