// The grouped GEMM's launcher (kernels/moe_grouped_gemm.h): argument checks, the tile choice and
// the dispatch to the Hopper kernel (kernels/cuda/sm90/moe_grouped_gemm_sm90.cu) on compute
// capability 9.0 with an sm_90a build, else to the mma.sync kernel (moe_grouped_gemm_mma.cu).
#include "kernels/moe_grouped_gemm.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_grouped_gemm_kernels.h"

namespace flashserve::cuda {
namespace {

// Below this many rows per expert on average the 64-row tile pads less than it loses to the
// 128-row tile's better ratio of MMA to shared-memory traffic (docs/MOE_GROUPED_GEMM.md).
constexpr int kRowsPerExpertFor128 = 192;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void check_args(const void* out, const void* a, const int32_t* offsets, const void* w, int num_experts,
                int n, int k, int max_rows) {
  FS_CHECK(num_experts >= 1 && num_experts <= kMoeGroupedGemmMaxExperts, "moe_grouped_gemm: num_experts ",
           num_experts, " outside 1..", kMoeGroupedGemmMaxExperts);
  FS_CHECK(n > 0 && n % 8 == 0, "moe_grouped_gemm: n = ", n, " must be a positive multiple of 8");
  FS_CHECK(k > 0 && k % 8 == 0, "moe_grouped_gemm: k = ", k,
           " must be a positive multiple of 8 (the bulk copies need 16-byte row strides)");
  FS_CHECK(max_rows >= 0, "moe_grouped_gemm: max_rows = ", max_rows, " is negative");
  FS_CHECK(offsets != nullptr, "moe_grouped_gemm: offsets is null");
  // The weight rows are addressed as one [num_experts * n] tensor with 32-bit coordinates, and
  // the schedule counts tiles in 32 bits: (max_rows / 64 + num_experts) * n / 128 tiles bound
  // every tile configuration's count.
  FS_CHECK(int64_t(num_experts) * n < (int64_t(1) << 31), "moe_grouped_gemm: num_experts * n = ",
           int64_t(num_experts) * n, " does not fit 32-bit row coordinates");
  FS_CHECK((int64_t(max_rows) / 64 + num_experts) * ((int64_t(n) + 127) / 128) < (int64_t(1) << 31),
           "moe_grouped_gemm: too many tiles (max_rows ", max_rows, ", n ", n, ")");
  if (max_rows == 0) return;
  FS_CHECK(out != nullptr && a != nullptr && w != nullptr, "moe_grouped_gemm: null out, a or w");
  FS_CHECK(aligned16(out) && aligned16(a) && aligned16(w), "moe_grouped_gemm: out, a and w must be 16-byte aligned");
}

// Compute capability and SM count of the current device (driver queries of cached values: cheap
// enough for every call, and allowed while a graph is captured).
struct DeviceInfo {
  int major = 0, minor = 0, num_sms = 0;
};
DeviceInfo device_info() {
  int dev = 0;
  DeviceInfo d;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&d.num_sms, cudaDevAttrMultiProcessorCount, dev));
  return d;
}

// The Hopper kernel runs on compute capability 9.0 when it is compiled in (sm_90a).
bool hopper_kernel_available(const DeviceInfo& d) {
#if FLASHSERVE_SM90_KERNELS
  return d.major == 9 && d.minor == 0;
#else
  (void)d;
  return false;
#endif
}

}  // namespace

const char* moe_gemm_tile_name(MoeGemmTile tile) {
  switch (tile) {
    case MoeGemmTile::kAuto: return "auto";
    case MoeGemmTile::k128x256: return "128x256";
    case MoeGemmTile::k64x256: return "64x256";
    case MoeGemmTile::k128x128Mma: return "mma_128x128";
  }
  return "?";
}

MoeGemmTile moe_grouped_gemm_auto_tile(int num_experts, int max_rows) {
  if (!hopper_kernel_available(device_info())) return MoeGemmTile::k128x128Mma;
  return num_experts > 0 && max_rows / num_experts >= kRowsPerExpertFor128 ? MoeGemmTile::k128x256
                                                                          : MoeGemmTile::k64x256;
}

size_t moe_grouped_gemm_workspace(int num_experts, int n, int k, int max_rows) {
  (void)num_experts, (void)n, (void)k, (void)max_rows;
  return 0;
}

void moe_grouped_gemm_tile(MoeGemmTile tile, void* out, const void* a, const int32_t* offsets, const void* w,
                           int num_experts, int n, int k, int max_rows, cudaStream_t stream) {
  check_args(out, a, offsets, w, num_experts, n, k, max_rows);
  const DeviceInfo dev = device_info();
  FS_CHECK(dev.major >= 8, "moe_grouped_gemm: needs a compute capability 8.0 or newer GPU, this one is ", dev.major,
           ".", dev.minor);
  if (tile == MoeGemmTile::kAuto) tile = moe_grouped_gemm_auto_tile(num_experts, max_rows);
  FS_CHECK(tile == MoeGemmTile::k128x128Mma || hopper_kernel_available(dev), "moe_grouped_gemm: the ",
           moe_gemm_tile_name(tile), " tile is the Hopper kernel's: it needs a compute capability 9.0 GPU (this one is ",
           dev.major, ".", dev.minor, ") and a build with sm_90a among CMAKE_CUDA_ARCHITECTURES");
  if (max_rows == 0) return;
  if (tile == MoeGemmTile::k128x128Mma) {
    detail::run_moe_grouped_gemm_mma(out, a, offsets, w, num_experts, n, k, max_rows, dev.num_sms, stream);
    return;
  }
#if FLASHSERVE_SM90_KERNELS
  detail::run_moe_grouped_gemm_sm90(tile == MoeGemmTile::k128x256, out, a, offsets, w, num_experts, n, k, max_rows,
                                    dev.num_sms, stream);
#endif
}

void moe_grouped_gemm(void* out, const void* a, const int32_t* offsets, const void* w, int num_experts, int n,
                      int k, int max_rows, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  (void)workspace, (void)workspace_bytes;  // moe_grouped_gemm_workspace is 0
  moe_grouped_gemm_tile(MoeGemmTile::kAuto, out, a, offsets, w, num_experts, n, k, max_rows, stream);
}

}  // namespace flashserve::cuda
