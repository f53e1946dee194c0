// Split-K decode merge kernel (KERNELS.md §4.2): one warp per (sequence, q head) row combines the
// row's split states with the formula of kernels/attention_state.h; lane i owns head_dim/32 columns.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention_decode.h"
#include "kernels/attention_state.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/ptx.cuh"

namespace flashserve::cuda {
namespace detail {

constexpr int kMergeWarps = 4;
constexpr int kMaxMergeSplits = 256;

template <class T, int kHeadDim>
__global__ void __launch_bounds__(kMergeWarps * 32)
    decode_merge_kernel(const float* __restrict__ o_part,    // [num_rows, num_splits, head_dim]
                        const float* __restrict__ lse_part,  // [num_rows, num_splits]
                        int num_rows, int num_splits,
                        T* __restrict__ out,     // [num_rows, head_dim]
                        float* __restrict__ lse) {  // [num_rows] or nullptr
  constexpr int kVec = kHeadDim / 32;
  static_assert(kVec == 2 || kVec == 4, "head_dim 64 or 128");
  __shared__ float s_lse[kMergeWarps][kMaxMergeSplits];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int row = blockIdx.x * kMergeWarps + warp;
  if (row >= num_rows) return;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched with programmatic stream serialisation: wait until the partial kernel has finished
  // and its writes are visible (a no-op when launched after anything else).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  float* my_lse = s_lse[warp];
  for (int s = lane; s < num_splits; s += 32) my_lse[s] = lse_part[size_t(row) * num_splits + s];
  __syncwarp();
  const float total = merged_lse(num_splits, [&](int s) { return my_lse[s]; });

  float acc[kVec] = {};
  const float* o = o_part + size_t(row) * num_splits * kHeadDim + lane * kVec;
  for (int s = 0; s < num_splits; ++s) {
    const float w = merge_weight(my_lse[s], total);
    if (w == 0.f) continue;  // empty split (lse -inf): its o was never written
    if constexpr (kVec == 4) {
      const float4 x = *reinterpret_cast<const float4*>(o + size_t(s) * kHeadDim);
      acc[0] += w * x.x, acc[1] += w * x.y, acc[2] += w * x.z, acc[3] += w * x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(o + size_t(s) * kHeadDim);
      acc[0] += w * x.x, acc[1] += w * x.y;
    }
  }
  T* dst = out + size_t(row) * kHeadDim + lane * kVec;
  if constexpr (kVec == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(pack2<T>(acc[0], acc[1]), pack2<T>(acc[2], acc[3]));
  } else {
    *reinterpret_cast<uint32_t*>(dst) = pack2<T>(acc[0], acc[1]);
  }
  if (lse != nullptr && lane == 0) lse[row] = total;
}

template <class T, int kHeadDim>
void launch_merge(const float* o_part, const float* lse_part, int num_rows, int num_splits,
                  void* out, float* lse, cudaStream_t stream) {
  // Programmatic dependent launch: the merge grid is scheduled while the partial kernel's last
  // blocks run, hiding its launch latency (~2 us); correctness comes from griddepcontrol.wait.
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((num_rows + kMergeWarps - 1) / kMergeWarps);
  config.blockDim = dim3(kMergeWarps * 32);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, decode_merge_kernel<T, kHeadDim>, o_part, lse_part, num_rows,
                                num_splits, static_cast<T*>(out), lse));
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail

void attention_decode_merge(const float* o_part, const float* lse_part, int num_rows,
                            int num_splits, int head_dim, void* out, float* lse, DType dtype,
                            cudaStream_t stream) {
  FS_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "decode merge: dtype ",
           dtype_name(dtype), " not supported (bf16, f16)");
  FS_CHECK(head_dim == 64 || head_dim == 128, "decode merge: head_dim ", head_dim,
           " not supported (64, 128)");
  FS_CHECK(num_splits >= 1 && num_splits <= detail::kMaxMergeSplits, "decode merge: num_splits ",
           num_splits, " outside 1..", detail::kMaxMergeSplits);
  FS_CHECK(num_rows >= 0, "decode merge: num_rows ", num_rows);
  if (num_rows == 0) return;
  const bool bf16 = dtype == DType::kBF16;
  if (head_dim == 64) {
    bf16 ? detail::launch_merge<__nv_bfloat16, 64>(o_part, lse_part, num_rows, num_splits, out, lse, stream)
         : detail::launch_merge<__half, 64>(o_part, lse_part, num_rows, num_splits, out, lse, stream);
  } else {
    bf16 ? detail::launch_merge<__nv_bfloat16, 128>(o_part, lse_part, num_rows, num_splits, out, lse, stream)
         : detail::launch_merge<__half, 128>(o_part, lse_part, num_rows, num_splits, out, lse, stream);
  }
}

}  // namespace flashserve::cuda
