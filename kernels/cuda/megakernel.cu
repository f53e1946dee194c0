// The decode megakernel: one persistent CTA per SM walks its queue of a lowered decode step
// (megakernel/lower.h). Dependencies are counters in global memory (acquire spin, release bump);
// the weights stream through a ring of shared-memory pages that cp.async keeps filled across
// instruction boundaries, so the next instruction's weights load while this one waits or
// finishes. The last CTA to finish zeroes the counters for the next launch. docs/megakernel.md.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/megakernel_attention.cuh"
#include "kernels/cuda/megakernel_ops.cuh"
#include "kernels/megakernel.h"

namespace flashserve::cuda {
namespace detail {

// Shared memory after the page ring: acc, attention scratch, rstd, reduction scratch, flag.
constexpr int kMkAccFloats = kMegaMaxTileRows * kMegaMaxBatch;
constexpr int kMkScratchFloats = kMegaMaxGroupDims + 2 * kMegaMaxHeadDim;
constexpr size_t kMkSmemBytes =
    size_t(kMkPages) * kMkPageBytes +
    sizeof(float) * (kMkAccFloats + kMkScratchFloats + kMegaMaxBatch + kMkWarps + 4);

__global__ void __launch_bounds__(kMkThreads, 1) megakernel_kernel(const MegaKernelArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint8_t* ring = smem;
  float* acc = reinterpret_cast<float*>(smem + size_t(kMkPages) * kMkPageBytes);
  float* scratch = acc + kMkAccFloats;
  float* rstd = scratch + kMkScratchFloats;
  float* red = rstd + kMegaMaxBatch;
  int* flag = reinterpret_cast<int*>(red + kMkWarps);
  const MegaDims& d = a.dims;
  const int q0 = a.queue_start[blockIdx.x], q1 = a.queue_start[blockIdx.x + 1];

  // The weight stream runs kMkPages - 1 pages ahead of the page being computed.
  StreamPos producer{q0, 0, 0};
  int issued = 0, consumed = 0;
  for (int i = 0; i < kMkPages - 1; ++i) issue_page(a, q1, producer, ring, issued++ % kMkPages);

  for (int i = q0; i < q1; ++i) {
    const MegaInstr in = a.instrs[i];
    if (in.wait_counter >= 0) wait_counter(a.counters + in.wait_counter, in.wait_count);
    const MegaOp op = MegaOp(in.op);
    bool merges = true;
    if (op == MegaOp::kEmbed) {
      embed_rows(a, in);
    } else if (op == MegaOp::kAttention) {
      merges = attention_split(a, in, scratch, flag);
    } else {
      const MegaLayerPtrs& L = a.layers[in.layer];
      const int64_t k = row_length(d, op);
      const float* input = op == MegaOp::kOProj ? a.attn : op == MegaOp::kDown ? a.act : a.x;
      const uint16_t* g = op == MegaOp::kQkv      ? L.input_norm
                          : op == MegaOp::kGateUp ? L.post_norm
                          : op == MegaOp::kLmHead ? a.final_norm
                                                  : nullptr;
      if (g) row_rstd(a.x, d.hidden, d.batch, d.eps, rstd, red);
      const int acc_rows = (in.end - in.begin) * num_segments(in);
      for (int j = threadIdx.x; j < acc_rows * d.batch; j += kMkThreads) acc[j] = 0.f;
      for (int s = 0; s < num_segments(in); ++s) {
        const Segment seg = segment(a, in, s);
        for (int pg = 0; pg < num_pages(seg); ++pg) {
          cp_async_wait<kMkPages - 2>();
          __syncthreads();  // the page landed for every thread; the slot reissued below is free
          issue_page(a, q1, producer, ring, issued++ % kMkPages);
          const int64_t off = int64_t(pg) * kMkPageBytes;
          const int n = int(min(int64_t(kMkPageBytes), seg.bytes - off)) / 2;
          const uint16_t* page =
              reinterpret_cast<const uint16_t*>(ring + size_t(consumed++ % kMkPages) * kMkPageBytes);
          gemv_page(page, off / 2, n, k, seg.row0, input, g, d.batch, acc);
        }
      }
      __syncthreads();
      gemv_epilogue(a, in, acc, rstd);
    }
    if (in.bump_counter >= 0 && merges) bump_counter(a.counters + in.bump_counter);
    else __syncthreads();  // the next instruction reuses acc and scratch
  }
  asm volatile("cp.async.wait_all;\n" ::);

  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(a.counters + a.num_counters, 1) == int(gridDim.x) - 1;
  __syncthreads();
  if (*flag) {  // the last CTA: every other one is past its last wait and read
    for (int c = threadIdx.x; c <= a.num_counters; c += kMkThreads) __stcg(a.counters + c, 0);
    __threadfence();
  }
}

}  // namespace detail

void launch_megakernel(const MegaKernelArgs& args, void* stream) {
  static bool configured = false;  // per process: the attribute is the kernel's, for all devices
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(detail::megakernel_kernel,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(detail::kMkSmemBytes)));
    configured = true;
  }
  FS_CHECK(args.dims.batch >= 1 && args.dims.batch <= kMegaMaxBatch &&
               args.dims.head_dim <= kMegaMaxHeadDim && args.dims.head_dim % 8 == 0 &&
               args.dims.num_q_heads / args.dims.num_kv_heads * args.dims.head_dim <=
                   kMegaMaxGroupDims,
           "megakernel: unsupported shape");
  void* params[] = {const_cast<MegaKernelArgs*>(&args)};
  CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(detail::megakernel_kernel),
                                         dim3(unsigned(args.num_sms)), dim3(detail::kMkThreads),
                                         params, detail::kMkSmemBytes,
                                         static_cast<cudaStream_t>(stream)));
  CUDA_CHECK_LAUNCH();
}

int megakernel_sm_count() {
  int dev = 0, n = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
  return n;
}

}  // namespace flashserve::cuda
