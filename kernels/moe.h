// Host launchers of the mixture-of-experts kernels (docs/MOE_KERNELS.md): routing
// (kernels/cuda/moe_route.cu), the token permutation into expert order and the weighted combine
// back (moe_permute.cu), the grouped GEMM (kernels/moe_grouped_gemm.h) between them and
// the fused small-batch decode kernels (moe_fused_decode.cu). The CPU twins are
// kernels/cpu/moe_ref.h. Every launch shape follows from the sizes (n, top_k, the experts'
// shapes), never from the routing, so a MoE layer can be recorded in a CUDA graph. Every launcher
// checks its launch and throws flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace flashserve::cuda {

constexpr int kMoeMaxExperts = 256;
constexpr int kMoeMaxTopK = 16;

// ---- Routing -----------------------------------------------------------------------------
// Per row: the top_k experts by logit, ties to the lower expert id, in descending order of
// logit; weights[j] = softmax(logits)[ids[j]], divided by the k weights' sum when `renormalize`
// (ref::moe_route). One warp per row; 1 <= top_k <= num_experts <= kMoeMaxExperts,
// top_k <= kMoeMaxTopK. A row holding a NaN routes as if the NaN were -inf.
void moe_route(int32_t* ids,         // [n, top_k]
               float* weights,       // [n, top_k]
               const float* logits,  // [n, num_experts]
               int n, int num_experts, int top_k, bool renormalize, cudaStream_t stream);

// ---- Permutation -------------------------------------------------------------------------
// The n * top_k (token, choice) pairs grouped by expert: permuted row p holds one pair, expert e's
// rows are [offsets[e], offsets[e + 1]) in the order of (token, choice) (stable, so the result
// never depends on thread timing), offsets[num_experts] = n * top_k: the row ranges that
// kernels/moe_grouped_gemm.h takes. Device memory only; nothing goes to the host.
struct MoePermutation {
  int32_t* offsets = nullptr;       // [num_experts + 1]
  int32_t* row_token = nullptr;     // [n * top_k] token of permuted row p
  int32_t* pair_row = nullptr;      // [n * top_k] permuted row of pair (t, j), t * top_k + j
};
// Bytes of the three arrays, and the arrays carved out of one such workspace.
size_t moe_permutation_bytes(int n, int top_k, int num_experts);
MoePermutation moe_permutation_in(void* workspace, int n, int top_k, int num_experts);
// One thread block: counts, prefix sums, then each pair's row. Expert ids outside
// [0, num_experts) are counted nowhere and their pairs get row -1 (moe_combine skips them).
void moe_permute(const MoePermutation& p,
                 const int32_t* ids,  // [n, top_k]
                 int n, int top_k, int num_experts, cudaStream_t stream);

// xp[p, :] = x[row_token[p], :] for every permuted row: the experts' inputs in expert order.
void moe_gather_rows(void* xp,                 // [rows, hidden] bf16
                     const void* x,            // [n, hidden] bf16
                     const int32_t* row_token, // [rows]
                     int rows, int hidden, cudaStream_t stream);

// out[t, :] = sum_j weights[t, j] * y[pair_row[t * top_k + j], :], rounded to bf16 once: the
// scatter back to token order with the routing weights, fp32 sums in the order j = 0, 1, ...
// pair_row null: y is in pair order (row t * top_k + j), as the fused kernels write it, and the
// pairs whose ids are outside [0, num_experts) are skipped (pair_row has -1 for them).
void moe_combine(void* out,                // [n, hidden] bf16
                 const void* y,            // [n * top_k, hidden] bf16, or f32 when y_f32
                 bool y_f32,
                 const int32_t* pair_row,  // [n * top_k] or null
                 const int32_t* ids,       // [n, top_k], read when pair_row is null
                 int num_experts,
                 const float* weights,     // [n, top_k]
                 int n, int top_k, int hidden, cudaStream_t stream);

// ---- Expert weights as the kernels read them ---------------------------------------------
// One projection ([rows, cols] per expert, out = x · wᵀ) of every expert, in one of the formats
// the CUDA backend loads (docs/QUANTIZATION.md, docs/FP8.md):
//  - kBf16: w bf16 [rows, cols];
//  - kFp8Rows: w E4M3 codes [rows, cols], scale [rows] (one per row);
//  - kBlockFp8: w E4M3 codes [rows, cols], scale [ceil(rows / block_n), scale_ld], one per block;
//  - kInt4: w the int4 layout of kernels/int4_gemv.h [rows, int4_row_bytes(cols)], scale
//    [groups, rows] f32, zeros [groups, rows] u8, perm [cols] i32 or null (act-order).
enum class MoeFormat : int { kBf16 = 0, kFp8Rows = 1, kBlockFp8 = 2, kInt4 = 3 };
struct MoeExpertPtrs {
  const void* w = nullptr;
  const float* scale = nullptr;
  const uint8_t* zeros = nullptr;
  const int32_t* perm = nullptr;
};
struct MoeProjection {
  MoeFormat format = MoeFormat::kBf16;
  const MoeExpertPtrs* experts = nullptr;  // [num_experts] device table
  int rows = 0, cols = 0;
  int group_size = 0;                      // kInt4
  int block_n = 0, block_k = 0, scale_ld = 0;  // kBlockFp8
};
// Whether the fused decode kernels take this projection: cols a multiple of 8; block-FP8 blocks
// of a multiple of 8 columns; int4 groups of a multiple of 8 columns.
bool moe_projection_supported(const MoeProjection& w);

// ---- Fused small-batch decode ------------------------------------------------------------
// For decode steps the selected experts' weights are streamed once each, whatever number of the
// step's tokens chose them, in two kernels that read the ids themselves (no permutation):
//   act[q, i] = silu(gate_e(x[t])[i]) * up_e(x[t])[i]      (f32)
//   y[q, h]   = down_e(act[q])[h]                          (f32)
// for every pair q = t * top_k + j, e = ids[q]; then moe_combine(y_f32, pair_row null) weighs and
// adds them per token. The launch grids follow from n, top_k and the shapes only. Up to
// kMoeFusedMaxPairs pairs (n * top_k); the kernels' register tiles are sized for up to 16 rows per
// expert, more take several passes over the expert's weights. gate_up: rows 2 * inter (gate then
// up), cols hidden; down: rows hidden, cols inter.
constexpr int kMoeFusedMaxPairs = 1024;
void moe_fused_gate_up(float* act,                  // [n * top_k, inter]
                       const void* x,               // [n, hidden] bf16
                       const int32_t* ids,          // [n, top_k]
                       const MoeProjection& gate_up,
                       int n, int top_k, int num_experts, cudaStream_t stream);
void moe_fused_down(float* y,                       // [n * top_k, hidden]
                    const float* act,               // [n * top_k, inter]
                    const int32_t* ids,             // [n, top_k]
                    const MoeProjection& down,
                    int n, int top_k, int num_experts, cudaStream_t stream);

// out[r, :] += sigmoid(gate_logit[r]) * y[r, :] (Qwen2-MoE's shared expert;
// ref::add_sigmoid_gated), fp32 math, out rounded to bf16 once.
void add_sigmoid_gated_bf16(void* out,               // [n, hidden] bf16
                            const void* y,           // [n, hidden] bf16
                            const void* gate_logit,  // [n] f32, or bf16 when gate_bf16
                            bool gate_bf16, int n, int hidden, cudaStream_t stream);

}  // namespace flashserve::cuda
