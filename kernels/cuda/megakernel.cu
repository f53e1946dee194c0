// The decode megakernel: one persistent CTA per SM walks its queue of a lowered decode step
// (megakernel/lower.h). Dependencies are counters in global memory (acquire spin, release bump);
// the weights stream through a ring of shared-memory pages that cp.async keeps filled across
// instruction boundaries, so the next instruction's weights load while this one waits or
// finishes. The last CTA to finish zeroes the counters for the next launch. docs/MEGAKERNEL.md.
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/megakernel_attention.cuh"
#include "kernels/cuda/megakernel_ops.cuh"
#include "kernels/megakernel.h"

namespace flashserve::cuda {
namespace detail {

// Shared memory after the page ring: acc, staged inputs, attention scratch, rstd, reduction
// scratch, flag.
constexpr int kMkAccFloats = kMegaMaxTileRows * kMegaMaxBatch;
constexpr int kMkScratchFloats = kMegaMaxGroupDims + 2 * kMegaMaxHeadDim;
constexpr size_t kMkSmemBytes =
    size_t(kMkPages) * kMkPageBytes +
    sizeof(float) * (kMkAccFloats + kMkStageFloats + kMkScratchFloats + kMegaMaxBatch +
                     kMkWarps * kMegaMaxBatch + 4);
static_assert(kMkSmemBytes <= 232448, "the megakernel's shared memory exceeds an H100 SM's");

// The weight stream's state on one CTA (uniform across it).
struct Stream {
  uint8_t* ring;
  StreamPos producer;
  int issued, consumed, end;
};

// A GEMV instruction at batch B: the input staged (when it fits), its pages from the ring, the
// epilogue.
// Returns the cycles thread 0 waited for pages.
template <int B>
__device__ __forceinline__ int64_t gemv_instr(const MegaKernelArgs& a, const MegaInstr& in,
                                              Stream& st, float* acc, float* xs, float* rstd,
                                              float* red) {
  const MegaDims& d = a.dims;
  const MegaOp op = MegaOp(in.op);
  const MegaLayerPtrs& L = a.layers[in.layer];
  const int k = int(row_length(d, op));
  const float* input = op == MegaOp::kOProj ? a.attn : op == MegaOp::kDown ? a.act : a.x;
  const uint16_t* g = op == MegaOp::kQkv      ? L.input_norm
                      : op == MegaOp::kGateUp ? L.post_norm
                      : op == MegaOp::kLmHead ? a.final_norm
                                              : nullptr;
  // vec: whole 16-byte chunks, which the weight stream copies by owner (issue_page): each thread
  // reads its own, so pages need no barrier. Steps of 2+ sequences (mma) stage bf16 inputs and
  // run the tensor-core page.
  constexpr bool kMma = B >= 2;
  bool vec = true;
  for (int s = 0; s < num_segments(in); ++s) vec = vec && is_vec(segment(a, in, s));
  const bool staged =
      vec && (kMma ? B * staged_stride(k) <= 2 * kMkStageFloats : B * k <= kMkStageFloats);
  if (staged) stage_input<B, kMma>(input, g, k, d.eps, xs, rstd, red);
  else if (g) row_rstd(a.x, d.hidden, B, d.eps, rstd, red);
  const int acc_rows = (in.end - in.begin) * num_segments(in);
  int64_t page_wait = 0;
  for (int j = threadIdx.x; j < acc_rows * B; j += kMkThreads) acc[j] = 0.f;
  __syncthreads();
  for (int s = 0; s < num_segments(in); ++s) {
    const Segment seg = segment(a, in, s);
    const int cbs = col_blocks(seg), row0 = int(seg.row0);
    for (int pg = 0; pg < num_pages(seg, kMma); ++pg) {
      const int64_t t0 = a.trace ? clock64() : 0;
      cp_async_wait<kMkPages - 2>();  // this thread's copies of the page landed
      if (!vec) __syncthreads();      // everyone's did; the slot reissued below is free
      if (a.trace) page_wait += clock64() - t0;
      issue_page(a, st.end, kMma, st.producer, st.ring, st.issued++ % kMkPages);
      const uint8_t* page = st.ring + size_t(st.consumed++ % kMkPages) * kMkPageBytes;
      const int off = pg * kMkPageBytes;
      const int n = int(min(int64_t(kMkPageBytes), seg.bytes - off)) / 2;
      const uint16_t* p16 = reinterpret_cast<const uint16_t*>(page);
      if (!vec) {
        gemv_page_any(p16, off / 2, n, k, row0, input, g, B, acc);
      } else if constexpr (kMma) {
        const int r0 = pg / cbs * kMkMmaRows, c0 = pg % cbs * kMkMmaCols;
        if (staged) gemv_page_mma<B, true>(page, r0, c0, seg.rows, k, row0, xs, nullptr, acc);
        else gemv_page_mma<B, false>(page, r0, c0, seg.rows, k, row0, input, g, acc);
      } else {
        if (staged) gemv_page<B, true>(p16, off / 2, n, k, row0, xs, nullptr, acc);
        else gemv_page<B, false>(p16, off / 2, n, k, row0, input, g, acc);
      }
    }
  }
  __syncthreads();
  gemv_epilogue(a, in, acc, rstd);
  return page_wait;
}

__global__ void __launch_bounds__(kMkThreads, 1) megakernel_kernel(const MegaKernelArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  float* acc = reinterpret_cast<float*>(smem + size_t(kMkPages) * kMkPageBytes);
  float* xs = acc + kMkAccFloats;
  float* scratch = xs + kMkStageFloats;
  float* rstd = scratch + kMkScratchFloats;
  float* red = rstd + kMegaMaxBatch;
  int* flag = reinterpret_cast<int*>(red + kMkWarps * kMegaMaxBatch);
  const int q0 = a.queue_start[blockIdx.x], q1 = a.queue_start[blockIdx.x + 1];

  // The weight stream runs kMkPages - 1 pages ahead of the page being computed.
  Stream st{smem, StreamPos{q0, 0, 0, -1, Segment{}}, 0, 0, q1};
  for (int i = 0; i < kMkPages - 1; ++i)
    issue_page(a, q1, a.dims.batch >= 2, st.producer, st.ring, st.issued++ % kMkPages);

  for (int i = q0; i < q1; ++i) {
    const MegaInstr in = a.instrs[i];
    const int64_t t_wait = a.trace ? clock64() : 0;
    const uint64_t ns = a.trace ? global_ns() : 0;
    if (in.wait_counter >= 0) wait_counter(a.counters + in.wait_counter, in.wait_count);
    const int64_t t_run = a.trace ? clock64() : 0;
    const MegaOp op = MegaOp(in.op);
    bool merges = true;
    int64_t page_wait = 0;
    if (op == MegaOp::kEmbed) {
      embed_rows(a, in);
    } else if (op == MegaOp::kAttention) {
      merges = attention_split(a, in, scratch, acc, reinterpret_cast<uint8_t*>(xs), flag);
    } else {
      switch (a.dims.batch) {
        case 1: page_wait = gemv_instr<1>(a, in, st, acc, xs, rstd, red); break;
        case 2: page_wait = gemv_instr<2>(a, in, st, acc, xs, rstd, red); break;
        case 3: page_wait = gemv_instr<3>(a, in, st, acc, xs, rstd, red); break;
        case 4: page_wait = gemv_instr<4>(a, in, st, acc, xs, rstd, red); break;
        case 5: page_wait = gemv_instr<5>(a, in, st, acc, xs, rstd, red); break;
        case 6: page_wait = gemv_instr<6>(a, in, st, acc, xs, rstd, red); break;
        case 7: page_wait = gemv_instr<7>(a, in, st, acc, xs, rstd, red); break;
        default: page_wait = gemv_instr<8>(a, in, st, acc, xs, rstd, red); break;
      }
    }
    if (in.bump_counter >= 0 && merges) bump_counter(a.counters + in.bump_counter);
    else __syncthreads();  // the next instruction reuses acc and scratch
    if (a.trace && threadIdx.x == 0) {
      int64_t* t = a.trace + int64_t(i) * kMegaTraceFields;
      t[0] = t_run - t_wait, t[1] = clock64() - t_run, t[2] = page_wait, t[3] = int64_t(ns);
    }
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
