// Cascade decode attention on CUDA (kernels/attention_cascade.h): a row gather for the prefix
// pass's queries, the prefill and decode kernels for the two passes, and the merge kernel (one
// warp per (sequence, q head) row, the formula of kernels/attention_state.h).
#include "kernels/attention_cascade.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention_decode.h"
#include "kernels/attention_prefill.h"
#include "kernels/attention_state.h"
#include "kernels/cuda/cuda_check.h"

namespace flashserve::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The workspace's pieces, in order.
struct Layout {
  size_t q_rows = 0, prefix_out = 0, prefix_lse = 0, suffix_lse = 0, decode = 0;
  size_t total() const { return q_rows + prefix_out + prefix_lse + suffix_lse + decode; }
};

Layout layout(const CascadeAttentionArgs& c, DType dtype, const DecodePlan& plan) {
  const PagedAttentionArgs& s = c.step;
  const size_t row_bytes = size_t(s.num_q_heads) * size_t(s.head_dim) * dtype_size(dtype);
  Layout l;
  l.q_rows = l.prefix_out = align_up(size_t(c.num_prefix_rows) * row_bytes);
  l.prefix_lse = align_up(size_t(c.num_prefix_rows) * size_t(s.num_q_heads) * sizeof(float));
  l.suffix_lse = align_up(size_t(s.num_seqs) * size_t(s.num_q_heads) * sizeof(float));
  l.decode = attention_decode_workspace_bytes(s.num_seqs, s.num_q_heads, s.head_dim, plan);
  return l;
}

// dst[r] = q[rows[r]], rows of `chunks` 16-byte chunks.
__global__ void cascade_gather_kernel(const uint4* __restrict__ q, const int32_t* __restrict__ rows,
                                      int chunks, uint4* __restrict__ dst) {
  const size_t r = blockIdx.x, src = size_t(__ldg(rows + r));
  for (int i = threadIdx.x; i < chunks; i += blockDim.x) dst[r * chunks + i] = q[src * chunks + i];
}

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }

constexpr int kMergeThreads = 256;

// One warp per (sequence b, q head h): state 0 is the suffix (in `out`), state s >= 1 the prefix
// row merge_rows[b][s - 1] (none when -1: weighs zero). Each lane owns head_dim / 32 columns.
template <class T, int kHeadDim>
__global__ void __launch_bounds__(kMergeThreads)
    cascade_merge_kernel(const CascadeAttentionArgs c, const T* __restrict__ prefix_out,
                         const float* __restrict__ prefix_lse, const float* __restrict__ suffix_lse,
                         T* out) {
  constexpr int kPerLane = kHeadDim / 32;
  const int hq = c.step.num_q_heads;
  const int row = int((size_t(blockIdx.x) * kMergeThreads + threadIdx.x) / 32);
  const int lane = threadIdx.x & 31;
  if (row >= c.step.num_seqs * hq) return;  // whole warps only
  const int b = row / hq, h = row % hq;
  const int32_t* rows = c.merge_rows + size_t(b) * c.merge_stride;
  const auto lse_of = [&](int s) -> float {
    if (s == 0) return suffix_lse[row];
    const int32_t r = __ldg(rows + s - 1);
    return r < 0 ? -INFINITY : prefix_lse[size_t(r) * hq + h];
  };
  const int num_states = 1 + c.merge_stride;
  const float total = merged_lse(num_states, lse_of);
  float acc[kPerLane] = {};
  for (int s = 0; s < num_states; ++s) {
    const float w = merge_weight(lse_of(s), total);
    if (w == 0.f) continue;  // empty state: its o may be unwritten
    const T* src = s == 0 ? out + size_t(row) * kHeadDim
                          : prefix_out + (size_t(__ldg(rows + s - 1)) * hq + h) * kHeadDim;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] += w * to_float(src[lane * kPerLane + i]);
  }
  T* dst = out + size_t(row) * kHeadDim + lane * kPerLane;  // the lane read these columns above
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) dst[i] = from_float<T>(acc[i]);
}

template <class T, int kHeadDim>
void launch_merge(const CascadeAttentionArgs& c, const void* prefix_out, const float* prefix_lse,
                  const float* suffix_lse, void* out, cudaStream_t stream) {
  const size_t threads = size_t(c.step.num_seqs) * c.step.num_q_heads * 32;
  const unsigned blocks = unsigned((threads + kMergeThreads - 1) / kMergeThreads);
  cascade_merge_kernel<T, kHeadDim><<<blocks, kMergeThreads, 0, stream>>>(
      c, static_cast<const T*>(prefix_out), prefix_lse, suffix_lse, static_cast<T*>(out));
  CUDA_CHECK_LAUNCH();
}

void check_supported(const CascadeAttentionArgs& c, DType dtype) {
  FS_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "cascade attention: dtype ",
           dtype_name(dtype), " not supported (bf16, f16)");
  FS_CHECK(c.step.head_dim == 64 || c.step.head_dim == 128, "cascade attention: head_dim ",
           c.step.head_dim, " not supported (64, 128)");
  FS_CHECK(c.num_parts >= 0 && c.num_prefix_rows >= 0 && c.merge_stride >= 0 &&
               c.step.num_seqs >= 0,
           "cascade attention: negative sizes");
  FS_CHECK(c.merge_stride == 0 || c.merge_rows != nullptr, "cascade attention: no merge rows");
}

}  // namespace

size_t attention_cascade_workspace_bytes(const CascadeAttentionArgs& c, DType dtype,
                                         const DecodePlan& suffix_plan) {
  return layout(c, dtype, suffix_plan).total();
}

void attention_cascade_merge(const CascadeAttentionArgs& c, const void* prefix_out,
                             const float* prefix_lse, const float* suffix_lse, void* out,
                             DType dtype, cudaStream_t stream) {
  check_supported(c, dtype);
  if (c.step.num_seqs == 0) return;
  const bool bf16 = dtype == DType::kBF16;
  if (c.step.head_dim == 64) {
    bf16 ? launch_merge<__nv_bfloat16, 64>(c, prefix_out, prefix_lse, suffix_lse, out, stream)
         : launch_merge<__half, 64>(c, prefix_out, prefix_lse, suffix_lse, out, stream);
  } else {
    bf16 ? launch_merge<__nv_bfloat16, 128>(c, prefix_out, prefix_lse, suffix_lse, out, stream)
         : launch_merge<__half, 128>(c, prefix_out, prefix_lse, suffix_lse, out, stream);
  }
}

void attention_cascade(const CascadeAttentionArgs& c, const void* q, const void* k_cache,
                       const void* v_cache, void* out, DType dtype, const DecodePlan& suffix_plan,
                       void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_supported(c, dtype);
  const Layout l = layout(c, dtype, suffix_plan);
  FS_CHECK(workspace_bytes >= l.total(), "cascade attention: workspace of ", workspace_bytes,
           " bytes, needs ", l.total());
  if (c.step.num_seqs == 0) return;
  char* ws = static_cast<char*>(workspace);
  void* q_rows = ws;
  void* prefix_out = ws + l.q_rows;
  float* prefix_lse = reinterpret_cast<float*>(ws + l.q_rows + l.prefix_out);
  float* suffix_lse = reinterpret_cast<float*>(ws + l.q_rows + l.prefix_out + l.prefix_lse);
  void* decode_ws = ws + l.q_rows + l.prefix_out + l.prefix_lse + l.suffix_lse;
  if (c.num_prefix_rows > 0) {
    const int chunks = int(size_t(c.step.num_q_heads) * c.step.head_dim * dtype_size(dtype) / 16);
    cascade_gather_kernel<<<unsigned(c.num_prefix_rows), 128, 0, stream>>>(
        static_cast<const uint4*>(q), c.prefix_q_rows, chunks, static_cast<uint4*>(q_rows));
    CUDA_CHECK_LAUNCH();
    attention_prefill(cascade_prefix_args(c), c.num_prefix_rows, q_rows, k_cache, v_cache,
                      prefix_out, prefix_lse, dtype, stream);
  }
  attention_decode(cascade_suffix_args(c), q, k_cache, v_cache, out, suffix_lse, dtype,
                   suffix_plan, decode_ws, l.decode, stream);
  attention_cascade_merge(c, prefix_out, prefix_lse, suffix_lse, out, dtype, stream);
}

}  // namespace flashserve::cuda
