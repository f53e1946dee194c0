// Split-K decode merge kernel (docs/KERNEL_NOTES.md §3.2): combines each (sequence, q head) row's split
// states with the formula of kernels/attention_state.h. The loads of many splits are in flight at
// once: a row is served by `groups` x head_dim/4 threads, thread (group, c) owns float4 column c of
// splits group, group + groups, ... and issues kMergeUnroll of those loads before using any; the
// groups' sums meet in shared memory. Rows with few splits share a 256-thread block. A row's sink
// (kernels/paged_attention.h) joins its merged LSE once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/attention_decode.h"
#include "kernels/attention_state.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/ptx.cuh"

namespace flashserve::cuda {
namespace detail {

constexpr int kMergeThreads = 256;
constexpr int kMaxMergeSplits = 256;
constexpr int kMergeUnroll = 8;  // loads in flight per thread and round

// How the rows map onto a block: `groups` threads per float4 column of a row (a power of two,
// the smallest with groups * kMergeUnroll >= num_splits, so <= 64 splits take one round of loads),
// threads_per_row = groups * head_dim / 4 (at least a warp, at most the block), rows_per_block =
// kMergeThreads / threads_per_row. Then threads_per_row >= num_splits and
// rows_per_block * num_splits <= kMaxMergeSplits (the LSE staging buffer), both checked by the host.
struct MergeShape {
  int groups, threads_per_row, rows_per_block;
};

inline MergeShape merge_shape(int head_dim, int num_splits) {
  const int cols = head_dim / 4;
  int groups = 32 / cols > 1 ? 32 / cols : 1;  // a row is at least one warp (the LSE reduction)
  while (groups * kMergeUnroll < num_splits && groups * cols < kMergeThreads) groups *= 2;
  const int threads_per_row = groups * cols;
  return {groups, threads_per_row, kMergeThreads / threads_per_row};
}

template <class T, int kHeadDim>
__global__ void __launch_bounds__(kMergeThreads)
    decode_merge_kernel(const float* __restrict__ o_part,    // [num_rows, num_splits, head_dim]
                        const float* __restrict__ lse_part,  // [num_rows, num_splits]
                        int num_rows, int num_splits, int groups, int rows_per_block,
                        T* __restrict__ out,     // [num_rows, head_dim]
                        float* __restrict__ lse,    // [num_rows] or nullptr
                        const float* __restrict__ sinks,  // [num_q_heads] or nullptr
                        int num_q_heads) {
  constexpr int kCols = kHeadDim / 4;  // float4 columns of a row
  static_assert(kCols == 16 || kCols == 32 || kCols == 64, "head_dim 64, 128 or 256");
  __shared__ float s_lse[kMaxMergeSplits];      // [rows_per_block, num_splits]
  __shared__ float4 s_acc[kMergeThreads];       // each thread's partial sum over its splits
  const int threads_per_row = groups * kCols;
  const int local_row = threadIdx.x / threads_per_row, t = threadIdx.x % threads_per_row;
  const int col = t % kCols, group = t / kCols, lane = threadIdx.x & 31;
  const int row = blockIdx.x * rows_per_block + local_row;
  const bool live = row < num_rows;  // dead threads still take part in the barriers
  // Partials are read with ld.global.cg (L2): they were written by the partial kernel, which may
  // still have been running when this block started (programmatic dependent launch).

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // Launched with programmatic stream serialisation: wait until the partial kernel has finished
  // and its writes are visible (a no-op when launched after anything else).
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
  float* my_lse = s_lse + local_row * num_splits;
  if (live)
    for (int s = t; s < num_splits; s += threads_per_row) my_lse[s] = __ldcg(lse_part + size_t(row) * num_splits + s);
  __syncthreads();

  // The row's merged LSE, computed by every warp of the row (a warp never spans two rows): each
  // lane merges a strided subset, then a butterfly of pairwise merges. Both operands of a pair
  // merge are the same on the two lanes, so every lane ends with the bitwise-same total.
  float total = -INFINITY;
  if (live) {  // uniform over the warp
    total = merged_lse((num_splits - lane + 31) / 32, [&](int i) { return my_lse[lane + 32 * i]; });
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, total, offset);
      const float mine = total;
      total = merged_lse(2, [&](int i) { return i == 0 ? mine : other; });
    }
    // The row's sink joins once, as a state with o = 0: the weights below shrink by its share.
    if (sinks != nullptr) total = lse_with_sink(total, __ldg(sinks + row % num_q_heads) * 1.4426950408889634f);
  }

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (live) {
    const float* o = o_part + size_t(row) * num_splits * kHeadDim + col * 4;
    for (int first = group; first < num_splits; first += groups * kMergeUnroll) {
      float w[kMergeUnroll];
      float4 x[kMergeUnroll];
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {  // all loads issued before any is used
        const int s = first + u * groups;
        w[u] = s < num_splits ? merge_weight(my_lse[s], total) : 0.f;
        x[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (w[u] != 0.f)  // empty split (lse -inf): its o was never written, may hold NaN
          x[u] = __ldcg(reinterpret_cast<const float4*>(o + size_t(s) * kHeadDim));
      }
#pragma unroll
      for (int u = 0; u < kMergeUnroll; ++u) {
        acc.x += w[u] * x[u].x;
        acc.y += w[u] * x[u].y;
        acc.z += w[u] * x[u].z;
        acc.w += w[u] * x[u].w;
      }
    }
  }
  if (groups > 1) {  // uniform over the block
    s_acc[threadIdx.x] = acc;
    __syncthreads();
    if (group == 0)
      for (int g = 1; g < groups; ++g) {  // fixed order: repeated runs are bitwise identical
        const float4 y = s_acc[threadIdx.x + g * kCols];
        acc.x += y.x, acc.y += y.y, acc.z += y.z, acc.w += y.w;
      }
  }
  if (!live || group != 0) return;
  T* dst = out + size_t(row) * kHeadDim + col * 4;
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack2<T>(acc.x, acc.y), pack2<T>(acc.z, acc.w));
  if (lse != nullptr && t == 0) lse[row] = total;
}

template <class T, int kHeadDim>
void launch_merge(const float* o_part, const float* lse_part, int num_rows, int num_splits,
                  void* out, float* lse, const float* sinks, int num_q_heads, cudaStream_t stream) {
  const MergeShape shape = merge_shape(kHeadDim, num_splits);
  FS_CHECK(shape.threads_per_row >= num_splits && shape.threads_per_row >= 32 &&
               shape.rows_per_block * num_splits <= kMaxMergeSplits,
           "decode merge: bad shape for ", num_splits, " splits");
  // Programmatic dependent launch: the merge grid is scheduled while the partial kernel's last
  // blocks run, hiding its launch latency (~2 us); correctness comes from griddepcontrol.wait.
  launch_pdl(decode_merge_kernel<T, kHeadDim>,
             dim3((num_rows + shape.rows_per_block - 1) / shape.rows_per_block), dim3(kMergeThreads),
             0, stream, o_part, lse_part, num_rows, num_splits, shape.groups, shape.rows_per_block,
             static_cast<T*>(out), lse, sinks, num_q_heads);
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail

void attention_decode_merge(const float* o_part, const float* lse_part, int num_rows,
                            int num_splits, int head_dim, void* out, float* lse, DType dtype,
                            cudaStream_t stream, const float* sinks, int num_q_heads) {
  FS_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "decode merge: dtype ",
           dtype_name(dtype), " not supported (bf16, f16)");
  FS_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "decode merge: head_dim ", head_dim,
           " not supported (64, 128, 256)");
  FS_CHECK(num_splits >= 1 && num_splits <= detail::kMaxMergeSplits, "decode merge: num_splits ",
           num_splits, " outside 1..", detail::kMaxMergeSplits);
  FS_CHECK(num_rows >= 0, "decode merge: num_rows ", num_rows);
  FS_CHECK(sinks == nullptr || (num_q_heads > 0 && num_rows % num_q_heads == 0), "decode merge: ",
           num_rows, " rows are not whole sequences of ", num_q_heads, " q heads (sinks)");
  if (num_rows == 0) return;
  // One instantiation per (element type, head_dim): T{} and std::integral_constant carry them.
  auto launch = [&](auto t, auto dim) {
    detail::launch_merge<decltype(t), decltype(dim)::value>(o_part, lse_part, num_rows, num_splits, out, lse,
                                                             sinks, num_q_heads, stream);
  };
  auto by_dtype = [&](auto dim) { dtype == DType::kBF16 ? launch(__nv_bfloat16{}, dim) : launch(__half{}, dim); };
  if (head_dim == 64) by_dtype(std::integral_constant<int, 64>{});
  else if (head_dim == 128) by_dtype(std::integral_constant<int, 128>{});
  else by_dtype(std::integral_constant<int, 256>{});
}

}  // namespace flashserve::cuda
