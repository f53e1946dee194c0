// The CUDA backend's mixture-of-experts ops (backends/backend.h, docs/MOE_KERNELS.md): the experts'
// layout at load, routing, the routed experts and the shared expert's gate. Kernels in
// kernels/moe.h. Every op queues on the backend's stream with launch shapes taken from the
// tensors' shapes only, and the workspace grows only outside graph capture, so a decode step's MoE
// layers record in its CUDA graph. Compiles to nothing unless FLASHSERVE_HAS_CUDA.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <algorithm>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "kernels/block_fp8.h"
#include "kernels/elementwise.h"
#include "kernels/fp8_quantize.h"
#include "kernels/int4_gemv.h"
#include "kernels/moe.h"
#include "kernels/moe_grouped_gemm.h"
#include "kernels/mxfp4.h"

namespace flashserve {
namespace {

// moe_experts runs the fused decode kernels up to this many tokens, the grouped GEMM above
// (bf16 experts: the GEMM's tensor cores pay from a few dozen rows per step).
constexpr int kMoeFusedRowsBf16 = 16;
// Quantized experts stay on the fused kernels longer: the general path dequantizes every expert
// to bf16 before its GEMM, writing and reading twice the bf16 weights, which only prefill-sized
// steps amortise.
constexpr int kMoeFusedRowsQuantized = 64;

// MoeExperts::device_tables of the CUDA backend: both projections of every expert as the kernels
// read them (a device table of per-expert pointers each), and, for bf16 experts, the stacked
// buffers the grouped GEMM takes.
struct CudaMoeTables {
  cuda::MoeProjection gate_up;  // [2 inter, hidden] per expert
  cuda::MoeProjection down;     // [hidden, inter] per expert
  std::shared_ptr<void> table;        // [2, num_experts] MoeExpertPtrs: gate_up's, then down's
  const void* gate_up_stack = nullptr;  // [num_experts, 2 inter, hidden] bf16, or null
  const void* down_stack = nullptr;     // [num_experts, hidden, inter] bf16, or null
  std::vector<cuda::MoeExpertPtrs> host;  // `table` on the host (the quantized general path)
};

cuda::MoeFormat format_of(const Tensor& w) {
  if (w.dtype == DType::kBF16) return cuda::MoeFormat::kBf16;
  if (w.dtype == DType::kI4) return cuda::MoeFormat::kInt4;
  FS_CHECK(w.dtype == DType::kF8E4M3 && (w.row_scale || w.block_scale),
           "MoE experts: a weight of dtype ", dtype_name(w.dtype), " the CUDA backend cannot run");
  return w.row_scale ? cuda::MoeFormat::kFp8Rows : cuda::MoeFormat::kBlockFp8;
}

cuda::MoeExpertPtrs pointers_of(const Tensor& w) {
  cuda::MoeExpertPtrs p;
  p.w = w.data;
  switch (format_of(w)) {
    case cuda::MoeFormat::kBf16: break;
    case cuda::MoeFormat::kFp8Rows: p.scale = w.row_scale; break;
    case cuda::MoeFormat::kBlockFp8: p.scale = w.block_scale; break;
    case cuda::MoeFormat::kInt4:
      p.scale = w.int4.scales, p.zeros = w.int4.zeros, p.perm = w.int4.perm;
      break;
  }
  return p;
}

// One projection of every expert: each in the same format and shape [rows, cols] (which
// load_weight may have turned into another format only for every expert alike, e.g. act-order
// int4 gate/up stacks that cannot stay packed all become bf16).
cuda::MoeProjection projection_of(const std::vector<Tensor>& ws, int rows, int cols,
                                  const char* what) {
  cuda::MoeProjection p;
  p.format = format_of(ws[0]);
  p.rows = rows, p.cols = cols;
  for (size_t e = 0; e < ws.size(); ++e) {
    const Tensor& w = ws[e];
    FS_CHECK(w.ndim == 2 && w.shape[0] == rows && w.shape[1] == cols && format_of(w) == p.format,
             "MoE experts: expert ", e, "'s ", what, " is [", w.shape[0], ", ", w.shape[1],
             "] in format ", int(format_of(w)), ", expert 0's [", rows, ", ", cols, "] in format ",
             int(p.format));
    if (p.format == cuda::MoeFormat::kInt4) {
      FS_CHECK(e == 0 || w.int4.group_size == p.group_size, "MoE experts: int4 group sizes differ");
      p.group_size = w.int4.group_size;
    }
    if (p.format == cuda::MoeFormat::kBlockFp8) {
      FS_CHECK(e == 0 || (w.block_n == p.block_n && w.block_k == p.block_k &&
                          w.block_scale_ld == p.scale_ld),
               "MoE experts: block-FP8 block shapes differ");
      p.block_n = w.block_n, p.block_k = w.block_k, p.scale_ld = w.block_scale_ld;
    }
  }
  return p;
}

}  // namespace

// bf16 experts go into one [E, 2I, H] and one [E, H, I] buffer (the grouped GEMM's operands),
// each expert through load_stacked_weight / load_weight first, so every checkpoint dtype is
// converted as a dense weight is; FP8, block-FP8 and int4 experts stay one buffer per expert in
// the dense kernels' layouts, which the MoE kernels read through a table of pointers.
std::shared_ptr<MoeExperts> CudaBackend::load_moe_experts(std::span<const TensorView> gate,
                                                          std::span<const TensorView> up,
                                                          std::span<const TensorView> down) {
  FS_CHECK(!gate.empty() && gate.size() == up.size() && gate.size() == down.size(),
           "MoE experts: ", gate.size(), " gate, ", up.size(), " up and ", down.size(),
           " down projections");
  FS_CHECK(gate.size() <= size_t(cuda::kMoeMaxExperts), "MoE experts: ", gate.size(),
           " experts; the CUDA kernels take up to ", cuda::kMoeMaxExperts);
  const int num_experts = int(gate.size());
  auto ex = std::make_shared<MoeExperts>();
  ex->num_experts = num_experts;
  auto tables = std::make_shared<CudaMoeTables>();
  Buffer gu_stack, dn_stack;
  for (int e = 0; e < num_experts; ++e) {
    const TensorView parts[2] = {gate[e], up[e]};
    Buffer gu = load_stacked_weight(parts);
    Buffer dn = load_weight(down[e]);
    FS_CHECK(gu.tensor.ndim == 2 && dn.tensor.ndim == 2 && gu.tensor.shape[0] % 2 == 0,
             "MoE experts: expert ", e, "'s projections are not matrices");
    if (e == 0) {
      ex->intermediate = int(gu.tensor.shape[0] / 2);
      ex->hidden = int(gu.tensor.shape[1]);
      FS_CHECK(dn.tensor.shape[0] == ex->hidden && dn.tensor.shape[1] == ex->intermediate,
               "MoE experts: down is [", dn.tensor.shape[0], ", ", dn.tensor.shape[1],
               "], gate/up [", gu.tensor.shape[0], ", ", gu.tensor.shape[1], "]");
      if (gu.tensor.dtype == DType::kBF16)
        gu_stack = allocate(DType::kBF16, {num_experts, gu.tensor.shape[0], gu.tensor.shape[1]});
      if (dn.tensor.dtype == DType::kBF16)
        dn_stack = allocate(DType::kBF16, {num_experts, dn.tensor.shape[0], dn.tensor.shape[1]});
    }
    // Copy a bf16 expert into its slot of the stack (the per-expert buffer is then dropped).
    auto place = [&](Buffer& b, Buffer& stack, std::vector<Tensor>& views) {
      const bool fits = stack.storage && b.tensor.dtype == DType::kBF16 &&
                        b.tensor.shape[0] == stack.tensor.shape[1] &&
                        b.tensor.shape[1] == stack.tensor.shape[2];
      if (fits) {
        char* at = static_cast<char*>(stack.tensor.data) + size_t(e) * b.tensor.bytes();
        CUDA_CHECK(cudaMemcpyAsync(at, b.tensor.data, b.tensor.bytes(), cudaMemcpyDeviceToDevice,
                                   stream_));
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        Tensor v = b.tensor;
        v.data = at;
        views.push_back(v);
      } else {
        views.push_back(b.tensor);
        ex->storage.push_back(std::move(b));
      }
    };
    place(gu, gu_stack, ex->gate_up);
    place(dn, dn_stack, ex->down);
  }
  const int hidden = ex->hidden, inter = ex->intermediate;
  tables->gate_up = projection_of(ex->gate_up, 2 * inter, hidden, "gate/up");
  tables->down = projection_of(ex->down, hidden, inter, "down");
  FS_CHECK(cuda::moe_projection_supported(tables->gate_up) &&
               cuda::moe_projection_supported(tables->down),
           "MoE experts: hidden ", hidden, " and intermediate ", inter, " must be multiples of 8 "
           "(under tensor parallelism, this rank's slice of the intermediate size), block-FP8 "
           "blocks and int4 groups multiples of 8 columns");
  if (tables->gate_up.format == cuda::MoeFormat::kBf16 && gu_stack.storage) {
    tables->gate_up_stack = gu_stack.tensor.data;
    ex->storage.push_back(gu_stack);
  }
  if (tables->down.format == cuda::MoeFormat::kBf16 && dn_stack.storage) {
    tables->down_stack = dn_stack.tensor.data;
    ex->storage.push_back(dn_stack);
  }
  std::vector<cuda::MoeExpertPtrs>& host = tables->host;
  for (const Tensor& w : ex->gate_up) host.push_back(pointers_of(w));
  for (const Tensor& w : ex->down) host.push_back(pointers_of(w));
  tables->table = allocate_bytes(host.size() * sizeof(cuda::MoeExpertPtrs));
  CUDA_CHECK(cudaMemcpy(tables->table.get(), host.data(), host.size() * sizeof(host[0]),
                        cudaMemcpyHostToDevice));
  auto* device = static_cast<const cuda::MoeExpertPtrs*>(tables->table.get());
  tables->gate_up.experts = device;
  tables->down.experts = device + num_experts;
  // The general path's dequantized copy of one quantized expert grows here, at load.
  if (tables->gate_up.format != cuda::MoeFormat::kBf16 ||
      tables->down.format != cuda::MoeFormat::kBf16)
    moe_expert_bytes_ = std::max(moe_expert_bytes_, size_t(2) * inter * hidden * 2);
  ex->device_tables = tables;
  return ex;
}

void CudaBackend::moe_route(Tensor expert_ids, Tensor weights, const Tensor& logits, int top_k,
                            bool renormalize) {
  FS_CHECK(logits.ndim == 2 && logits.dtype == DType::kF32 && logits.device == Device::kCuda,
           "moe_route: logits must be [n, num_experts] f32 on the GPU");
  const int64_t n = logits.dim(0);
  const int num_experts = int(logits.dim(1));
  FS_CHECK(expert_ids.ndim == 2 && expert_ids.dim(0) == n && expert_ids.dim(1) == top_k &&
               weights.ndim == 2 && weights.dim(0) == n && weights.dim(1) == top_k,
           "moe_route: ids and weights must be [", n, ", ", top_k, "]");
  cuda::moe_route(expert_ids.as<int32_t>(), weights.as<float>(), logits.as<float>(), int(n),
                  num_experts, top_k, renormalize, stream_);
}

// The workspace of one moe_experts call (the permutation, then the path's activations), grown
// only where no graph is being recorded; growing drops the recorded graphs (graph_epoch).
void* CudaBackend::moe_workspace(size_t bytes) {
  if (bytes > moe_ws_bytes_) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream_, &st));
    FS_CHECK(st == cudaStreamCaptureStatusNone, "moe_experts: the MoE workspace must grow (",
             bytes, " bytes) while a graph is recorded; run the step eagerly first");
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier steps may still use the old one
    moe_ws_ = nullptr;
    moe_ws_ = allocate_bytes(bytes);
    moe_ws_bytes_ = bytes;
    ++epoch_;  // recorded graphs point at the old workspace
  }
  return moe_ws_.get();
}

// out rows [offsets[e], offsets[e + 1]) = a's · w_e ᵀ over every expert: THE call site of the
// grouped GEMM. bf16 stacks run in one launch; quantized experts are dequantized one at a time
// into the workspace's expert slot, each followed by its group's GEMM (every expert's weights are
// read once, which at the step sizes of this path is what the grouped GEMM would read too).
void CudaBackend::moe_grouped_matmul(void* out, const void* a, const cuda::MoePermutation& p,
                                     const cuda::MoeProjection& w, const void* stack,
                                     const cuda::MoeExpertPtrs* host, int num_experts,
                                     int max_rows, void* expert_bf16) {
  if (stack) {
    cuda::moe_grouped_gemm(out, a, p.offsets, stack, num_experts, w.rows, w.cols, max_rows,
                           nullptr, 0, stream_);
    return;
  }
  FS_CHECK(expert_bf16 && host, "moe_experts: no scratch for a quantized expert");
  // moe_route gives an expert at most one row per token, but the grid covers any routing.
  const int rows_per_expert = max_rows;
  for (int e = 0; e < num_experts; ++e) {
    const cuda::MoeExpertPtrs& q = host[e];
    switch (w.format) {
      case cuda::MoeFormat::kBf16:
        CUDA_CHECK(cudaMemcpyAsync(expert_bf16, q.w, size_t(w.rows) * w.cols * 2,
                                   cudaMemcpyDeviceToDevice, stream_));
        break;
      case cuda::MoeFormat::kFp8Rows:
        cuda::dequantize_fp8_bf16(expert_bf16, q.w, q.scale, w.rows, w.cols, stream_);
        break;
      case cuda::MoeFormat::kBlockFp8:
        cuda::block_fp8_dequantize_bf16(expert_bf16, q.w, q.scale, w.scale_ld, w.rows, w.cols,
                                        w.block_n, w.block_k, stream_);
        break;
      case cuda::MoeFormat::kInt4:
        cuda::int4_dequantize_bf16(expert_bf16, static_cast<const uint8_t*>(q.w), q.scale,
                                   q.zeros, q.perm, w.rows, w.cols, w.group_size, stream_);
        break;
    }
    cuda::moe_grouped_gemm(out, a, p.offsets + e, expert_bf16, 1, w.rows, w.cols,
                           rows_per_expert, nullptr, 0, stream_);
  }
}

void CudaBackend::moe_experts(Tensor out, const Tensor& x, const Tensor& expert_ids,
                              const Tensor& weights, const MoeExperts& experts) {
  expect_bf16(out, "moe_experts out");
  expect_bf16(x, "moe_experts x");
  const auto* t = static_cast<const CudaMoeTables*>(experts.device_tables.get());
  FS_CHECK(t || experts.mxfp4, "moe_experts: experts not loaded by the CUDA backend");
  const int64_t n = x.dim(0);
  const int hidden = experts.hidden, inter = experts.intermediate;
  const int num_experts = experts.num_experts;
  FS_CHECK(x.ndim == 2 && x.dim(1) == hidden && out.ndim == 2 && out.dim(0) == n &&
               out.dim(1) == hidden && expert_ids.ndim == 2 && expert_ids.dim(0) == n &&
               expert_ids.dtype == DType::kI32 && weights.ndim == 2 && weights.dim(0) == n &&
               weights.dim(1) == expert_ids.dim(1) && weights.dtype == DType::kF32,
           "moe_experts: x and out [n, ", hidden, "], ids and weights [n, top_k]");
  const int top_k = int(expert_ids.dim(1));
  FS_CHECK(top_k >= 1 && top_k <= num_experts, "moe_experts: top_k ", top_k, " of ", num_experts,
           " experts");
  const int32_t* ids = expert_ids.as<int32_t>();
  if (n == 0) return;
  if (experts.mxfp4) return moe_experts_mxfp4(out, x, ids, weights, experts, top_k);
  const int rows = int(n) * top_k;
  const bool quantized = t->gate_up.format != cuda::MoeFormat::kBf16 ||
                         t->down.format != cuda::MoeFormat::kBf16;
  const bool fused = rows <= cuda::kMoeFusedMaxPairs &&
                     n <= (quantized ? kMoeFusedRowsQuantized : kMoeFusedRowsBf16);
  if (fused) {
    // act f32 [rows, inter], y f32 [rows, hidden], in pair order.
    const size_t act_bytes = align16(size_t(rows) * inter * 4);
    char* ws = static_cast<char*>(moe_workspace(act_bytes + size_t(rows) * hidden * 4));
    float* act = reinterpret_cast<float*>(ws);
    float* y = reinterpret_cast<float*>(ws + act_bytes);
    cuda::moe_fused_gate_up(act, x.data, ids, t->gate_up, int(n), top_k, num_experts, stream_);
    cuda::moe_fused_down(y, act, ids, t->down, int(n), top_k, num_experts, stream_);
    cuda::moe_combine(out.data, y, true, nullptr, ids, num_experts, weights.as<float>(), int(n),
                      top_k, hidden, stream_);
    return;
  }
  // The permutation, then xp bf16 [rows, hidden], h bf16 [rows, 2 inter], act bf16 [rows, inter],
  // y bf16 [rows, hidden], and (quantized) one expert dequantized to bf16.
  const size_t perm_bytes = align16(cuda::moe_permutation_bytes(int(n), top_k, num_experts));
  const size_t xp_bytes = align16(size_t(rows) * hidden * 2);
  const size_t h_bytes = align16(size_t(rows) * 2 * inter * 2);
  const size_t act_bytes = align16(size_t(rows) * inter * 2);
  const size_t y_bytes = align16(size_t(rows) * hidden * 2);
  char* ws = static_cast<char*>(
      moe_workspace(perm_bytes + xp_bytes + h_bytes + act_bytes + y_bytes + moe_expert_bytes_));
  const cuda::MoePermutation p = cuda::moe_permutation_in(ws, int(n), top_k, num_experts);
  char* xp = ws + perm_bytes;
  char* h = xp + xp_bytes;
  char* act = h + h_bytes;
  char* y = act + act_bytes;
  char* expert_bf16 = quantized ? y + y_bytes : nullptr;
  cuda::moe_permute(p, ids, int(n), top_k, num_experts, stream_);
  cuda::moe_gather_rows(xp, x.data, p.row_token, rows, hidden, stream_);
  moe_grouped_matmul(h, xp, p, t->gate_up, t->gate_up_stack, t->host.data(), num_experts, rows,
                     expert_bf16);
  cuda::swiglu_fused_bf16(act, h, rows, inter, stream_);
  moe_grouped_matmul(y, act, p, t->down, t->down_stack, t->host.data() + num_experts, num_experts,
                     rows, expert_bf16);
  cuda::moe_combine(out.data, y, false, p.pair_row, nullptr, num_experts, weights.as<float>(),
                    int(n), top_k, hidden, stream_);
}

// gpt-oss's MXFP4 experts. Up to kMoeFusedRowsQuantized tokens: the GEMV pair by pair (each
// selected expert's weights streamed from L2 or memory per pair), gate/up with the clamped
// SwiGLU fused, then down, then the weighted combine. More: the permutation into expert order,
// the grouped MXFP4 GEMM for gate/up, the activation, the grouped GEMM for down, the combine.
void CudaBackend::moe_experts_mxfp4(Tensor out, const Tensor& x, const int32_t* ids,
                                    const Tensor& weights, const MoeExperts& experts, int top_k) {
  const Mxfp4Experts& m = *experts.mxfp4;
  const int n = int(x.dim(0)), hidden = experts.hidden, inter = experts.intermediate;
  const int num_experts = experts.num_experts, rows = n * top_k;
  const cuda::Mxfp4Weights gate_up{m.gate_up_blocks, m.gate_up_scales, m.gate_up_bias,
                                   num_experts, 2 * inter, hidden};
  const cuda::Mxfp4Weights down{m.down_blocks, m.down_scales, m.down_bias, num_experts, hidden,
                                inter};
  const cuda::SwigluClamp clamp{m.limit, m.alpha};
  if (n <= kMoeFusedRowsQuantized) {
    // act f32 [rows, inter], y f32 [rows, hidden], in pair order.
    const size_t act_bytes = align16(size_t(rows) * inter * 4);
    char* ws = static_cast<char*>(moe_workspace(act_bytes + size_t(rows) * hidden * 4));
    float* act = reinterpret_cast<float*>(ws);
    float* y = reinterpret_cast<float*>(ws + act_bytes);
    cuda::mxfp4_gemv(act, true, x.data, false, gate_up, ids, rows, top_k, &clamp, stream_);
    cuda::mxfp4_gemv(y, true, act, true, down, ids, rows, 1, nullptr, stream_);
    cuda::moe_combine(out.data, y, true, nullptr, ids, num_experts, weights.as<float>(), n,
                      top_k, hidden, stream_);
    return;
  }
  const size_t perm_bytes = align16(cuda::moe_permutation_bytes(n, top_k, num_experts));
  const size_t xp_bytes = align16(size_t(rows) * hidden * 2);
  const size_t h_bytes = align16(size_t(rows) * 2 * inter * 2);
  const size_t act_bytes = align16(size_t(rows) * inter * 2);
  const size_t y_bytes = align16(size_t(rows) * hidden * 2);
  char* ws = static_cast<char*>(moe_workspace(perm_bytes + xp_bytes + h_bytes + act_bytes + y_bytes));
  const cuda::MoePermutation p = cuda::moe_permutation_in(ws, n, top_k, num_experts);
  char* xp = ws + perm_bytes;
  char* h = xp + xp_bytes;
  char* act = h + h_bytes;
  char* y = act + act_bytes;
  cuda::moe_permute(p, ids, n, top_k, num_experts, stream_);
  cuda::moe_gather_rows(xp, x.data, p.row_token, rows, hidden, stream_);
  cuda::mxfp4_gemm(h, xp, gate_up, p.offsets, rows, stream_);
  cuda::swiglu_clamped_bf16(act, h, rows, inter, clamp, stream_);
  cuda::mxfp4_gemm(y, act, down, p.offsets, rows, stream_);
  cuda::moe_combine(out.data, y, false, p.pair_row, nullptr, num_experts, weights.as<float>(), n,
                    top_k, hidden, stream_);
}

void CudaBackend::add_sigmoid_gated(Tensor out, const Tensor& y, const Tensor& gate_logit) {
  expect_bf16(out, "add_sigmoid_gated out");
  expect_bf16(y, "add_sigmoid_gated y");
  const int64_t n = out.dim(0);
  FS_CHECK(out.ndim == 2 && y.ndim == 2 && y.dim(0) == n && y.dim(1) == out.dim(1) &&
               gate_logit.numel() == n &&
               (gate_logit.dtype == DType::kF32 || gate_logit.dtype == DType::kBF16),
           "add_sigmoid_gated: out and y [n, hidden], gate_logit [n, 1] f32 or bf16");
  cuda::add_sigmoid_gated_bf16(out.data, y.data, gate_logit.data,
                               gate_logit.dtype == DType::kBF16, int(n), int(out.dim(1)), stream_);
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
