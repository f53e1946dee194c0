// The CUDA backend's matmuls (backends/cuda/cuda_backend.h): cuBLASLt (bf16 inputs, fp32
// accumulation; one descriptor set + heuristic per shape, cached), the skinny-matmul kernels for
// decode steps (kernels/gemv.h), FP8 weights as the W8A8 GEMM or dequantized, and the fused
// add + norm + matmul. Int4 weights go to cuda_int4.cpp, block-wise FP8 to cuda_block_fp8.cpp.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <algorithm>
#include <tuple>

#include "backends/cuda/cuda_backend.h"
#include "kernels/fp8_quantize.h"
#include "kernels/gemv.h"
#include "kernels/norms.h"

namespace flashserve {

// FP8 weights (docs/FP8.md): the skinny kernels read the codes up to kGemvMaxRows rows
// (whatever gemv_max_rows says, unless it is 0: the all-cuBLASLt baseline); larger steps
// quantize x per row and run cuBLASLt's FP8 GEMM (matmul_fp8_gemm), or, where that is off or
// has no algorithm, dequantize the weight into a bf16 scratch buffer and run the bf16 GEMM.
void CudaBackend::matmul(Tensor out, const Tensor& x, const Tensor& w) {
  expect_bf16(x, "matmul x");
  if (w.dtype == DType::kI4) {
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    FS_CHECK(x.numel() == m * k && out.numel() == m * n, "matmul: x ", x.numel(), " w ", n, "x",
             k, " out ", out.numel());
    return matmul_int4(out, x, w, m, n, k);
  }
  if (w.block_scale) {  // block-wise FP8: cuda_block_fp8.cpp
    const int64_t k = w.dim(1), n = w.dim(0), m = x.numel() / k;
    FS_CHECK(x.numel() == m * k && out.numel() == m * n, "matmul: x ", x.numel(), " w ", n, "x",
             k, " out ", out.numel());
    return matmul_block_fp8(out, x, w, m, n, k);
  }
  const bool fp8 = w.dtype == DType::kF8E4M3;
  if (!fp8) expect_bf16(w, "matmul w");
  const int64_t k = w.dim(w.ndim - 1), n = w.numel() / k, m = x.numel() / k;
  FS_CHECK(x.numel() == m * k && out.numel() == m * n, "matmul: x ", x.numel(), " w ", n, "x",
           k, " out ", out.numel());
  FS_CHECK(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "matmul out dtype ",
           dtype_name(out.dtype));
  if (m == 0) return;
  const bool out_f32 = out.dtype == DType::kF32;
  const void* w_bf16 = w.data;
  if (fp8) {
    if (gemv_max_rows_ > 0 &&
        cuda::gemv_fp8_supported(int(m), int(k), x.data, w.data, w.row_scale, out.data)) {
      cuda::gemv_fp8(out.data, out_f32, x.data, w.data, w.row_scale, int(m), int(n), int(k),
                     stream_);
      return;
    }
    if (matmul_fp8_gemm(out, x, w, m, n, k)) return;
    FS_CHECK(fp8_scratch_ && size_t(n * k) * 2 <= fp8_scratch_bytes_, "matmul: no FP8 scratch for ",
             n, "x", k);
    cuda::dequantize_fp8_bf16(fp8_scratch_.get(), w.data, w.row_scale, int(n), int(k), stream_);
    w_bf16 = fp8_scratch_.get();
  } else if (m <= gemv_max_rows_ &&
             cuda::gemv_supported(int(m), int(k), x.data, w.data, out.data)) {
    cuda::gemv_bf16(out.data, out_f32, x.data, w.data, int(m), int(n), int(k), stream_);
    return;
  }
  const GemmPlan& p = *gemm_plan(int(m), int(n), int(k), out.dtype, false);
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasLtMatmul(lt_, p.desc, &alpha, w_bf16, p.a, x.data, p.b, &beta, out.data,
                              p.c, out.data, p.c, &p.algo, gemm_ws_.get(), kGemmWorkspaceBytes,
                              stream_));
}

// W8A8 (docs/FP8.md): x quantized to E4M3 with one scale per row (cuda::quantize_rows_fp8)
// into the FP8 scratch, cuBLASLt's E4M3 x E4M3 GEMM (fp32 accumulation) run unscaled, then
// cuda::scale_rows_cols_fp8 multiplies each output by its token's and its weight row's scale
// (cuBLASLt's own per-row "outer vector" scales have no FP8 algorithm on the H100 with CUDA
// 13.0). It reads 1 byte per weight where the dequantize path reads 1, writes 2 and reads 2
// again. Rows go in chunks that fit the scratch (one chunk but for very long prompts). False,
// with nothing run, where the GPU has no FP8 tensor cores or cuBLASLt has no algorithm for the
// shape.
bool CudaBackend::matmul_fp8_gemm(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n,
                     int64_t k) {
  if (!fp8_gemm_ || k % 16 != 0 || n % 16 != 0 || !fp8_scratch_) return false;
  const auto scales_at = [k](int64_t rows) { return align16(size_t(rows * k)); };
  int64_t cap = int64_t(fp8_scratch_bytes_) / (k + 4) - 4;  // rows of codes + scales
  cap -= cap > 16 ? cap % 16 : 0;
  const int64_t chunk = std::min(m, cap);
  if (chunk < 1 || scales_at(chunk) + size_t(chunk) * 4 > fp8_scratch_bytes_) return false;
  const GemmPlan* full = gemm_plan(int(chunk), int(n), int(k), out.dtype, true);
  const GemmPlan* tail = m % chunk ? gemm_plan(int(m % chunk), int(n), int(k), out.dtype, true)
                                   : full;
  if (!full || !tail) return false;
  auto* codes = static_cast<uint8_t*>(fp8_scratch_.get());
  auto* x_scale = reinterpret_cast<float*>(codes + scales_at(chunk));
  const size_t out_row = size_t(n) * dtype_size(out.dtype);
  for (int64_t r = 0; r < m; r += chunk) {
    const int64_t rows = std::min(chunk, m - r);
    const GemmPlan& p = rows == chunk ? *full : *tail;
    cuda::quantize_rows_fp8(codes, x_scale, static_cast<const char*>(x.data) + r * k * 2,
                            int(rows), int(k), stream_);
    void* o = static_cast<char*>(out.data) + size_t(r) * out_row;
    const float alpha = 1.f, beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(lt_, p.desc, &alpha, w.data, p.a, codes, p.b, &beta, o, p.c, o,
                                p.c, &p.algo, gemm_ws_.get(), kGemmWorkspaceBytes, stream_));
    cuda::scale_rows_cols_fp8(o, out.dtype == DType::kF32, x_scale, w.row_scale, int(rows),
                              int(n), stream_);
  }
  return true;
}

// One skinny-matmul kernel with the add + norm in front where that measured faster
// (cuda::gemv_add_rms_norm_pays), else the add + norm kernel and the matmul.
void CudaBackend::add_rms_norm_matmul(Tensor out, Tensor h, Tensor x_out, const Tensor& x, const Tensor& delta,
                         const Tensor& norm_w, float eps, const Tensor& w) {
  expect_bf16(x, "add_rms_norm_matmul x");
  expect_bf16(norm_w, "add_rms_norm_matmul norm_w");
  const bool add = delta.data != nullptr;
  const int64_t hidden = norm_w.numel(), m = hidden > 0 ? x.numel() / hidden : 0;
  FS_CHECK(hidden > 0 && x.numel() == m * hidden && w.dim(w.ndim - 1) == hidden &&
               (!add || (delta.numel() == x.numel() && x_out.numel() == x.numel())),
           "add_rms_norm_matmul: shapes");
  if (m == 0) return;
  const int64_t n = w.numel() / hidden;
  if (add) {
    expect_bf16(delta, "add_rms_norm_matmul delta");
    expect_bf16(x_out, "add_rms_norm_matmul x_out");
  }
  FS_CHECK(out.numel() == m * n && (out.dtype == DType::kF32 || out.dtype == DType::kBF16),
           "add_rms_norm_matmul: out");
  if (m <= gemv_max_rows_ && w.dtype == DType::kBF16 &&
      cuda::gemv_add_rms_norm_pays(int(m), int(hidden)) &&
      cuda::gemv_add_rms_norm_supported(int(m), int(hidden), x.data, add ? delta.data : nullptr,
                                        add ? x_out.data : nullptr, norm_w.data, w.data, out.data)) {
    cuda::gemv_add_rms_norm_bf16(out.data, out.dtype == DType::kF32, add ? x_out.data : nullptr,
                                 x.data, add ? delta.data : nullptr, norm_w.data, eps, w.data,
                                 int(m), int(n), int(hidden), stream_);
    return;
  }
  expect_bf16(h, "add_rms_norm_matmul h");
  FS_CHECK(h.numel() == x.numel(), "add_rms_norm_matmul: h");
  if (add)
    cuda::add_rms_norm_out_bf16(h.data, x_out.data, x.data, delta.data, norm_w.data, int(m),
                                int(hidden), eps, stream_);
  else
    cuda::rms_norm_bf16(h.data, x.data, norm_w.data, int(m), int(hidden), eps, stream_);
  matmul(out, h, w);
}

// The cached cuBLASLt plan of one product: bf16 x bf16, or (fp8) E4M3 x E4M3 unscaled. Null
// for an FP8 shape cuBLASLt has no algorithm for (remembered, so that the caller's fallback is
// decided once); a bf16 shape without one is an error.
const GemmPlan* CudaBackend::gemm_plan(int m, int n, int k, DType out_dtype, bool fp8) {
  const auto key = std::make_tuple(m, n, k, int(out_dtype) + (fp8 ? 256 : 0));
  auto it = gemms_.find(key);
  if (it != gemms_.end()) return it->second.desc ? &it->second : nullptr;
  GemmPlan p;
  const cudaDataType_t ct = out_dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;  // FP8 needs this "TN" form
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                              sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                              sizeof(tb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, in, k, n, k));  // w: k×n, ld k
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, in, k, m, k));  // x: k×m, ld k
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, ct, n, m, n));  // out: n×m, ld n
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kGemmWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (fp8 && (st != CUBLAS_STATUS_SUCCESS || found == 0)) {
    destroy(p);
    gemms_.emplace(key, GemmPlan{});
    return nullptr;
  }
  FS_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0, "cuBLASLt has no algorithm for ", m, "x",
           n, "x", k, " (status ", int(st), ")");
  p.algo = res.algo;
  return &gemms_.emplace(key, p).first->second;
}

void CudaBackend::destroy(GemmPlan& p) {
  if (!p.desc) return;
  cublasLtMatrixLayoutDestroy(p.a);
  cublasLtMatrixLayoutDestroy(p.b);
  cublasLtMatrixLayoutDestroy(p.c);
  cublasLtMatmulDescDestroy(p.desc);
  p = GemmPlan{};
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
