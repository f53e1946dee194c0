// The CUDA backend's block-wise FP8 weights (docs/QUANTIZATION.md): a projection's codes (still
// in the mapped file) and block scales go up once as a kF8E4M3 tensor with block_scale; its
// matmuls run the block-FP8 skinny kernels up to kBlockFp8GemvMaxRows rows, above them cuBLASLt's
// block-scaled FP8 GEMM (128x128 blocks, x quantized per token per 128 columns) or the weight
// dequantized into the bf16 scratch and the bf16 GEMM. Compiles to nothing unless
// FLASHSERVE_HAS_CUDA.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backends/cuda/cuda_backend.h"
#include "kernels/block_fp8.h"
#include "weights/block_fp8_weights.h"

namespace flashserve {

namespace {
constexpr int kLtBlock = 128;  // the only block shape cuBLASLt's block-scaled GEMM takes

// A block-scaled plan's scale pointers (A: the weight's, B: x's), device memory.
void set_scale_pointers(cublasLtMatmulDesc_t desc, const float* w_scale, const float* x_scale) {
  const void* a = w_scale;
  const void* b = x_scale;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a,
                                              sizeof(a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b,
                                              sizeof(b)));
}
}  // namespace

// Parts that stack (block_fp8_stackable: one projection, or q/k/v and gate/up whose parts but
// the last are whole row blocks) load packed, in one allocation: the codes, each part's sent
// from the mapped file straight to its rows through the pinned staging (upload()), then the
// scales with each row block's k-blocks padded to a multiple of 4 (the leading dimension
// cuBLASLt's BLK128x128_32F scales need; the kernels read the same layout). The bf16 scratch of
// the fallback (and of x's codes and scales on the GEMM path) grows here, at load, so that no
// step (nor a recorded graph) reallocates it. Parts that do not stack become one bf16 weight:
// each part goes up packed alone and the GPU dequantizes it into its rows (each value rounded
// once, as its f32 values would be).
Buffer CudaBackend::load_block_fp8_weight(std::span<const TensorView> parts) {
  const auto start = std::chrono::steady_clock::now();
  const auto counted = [&](Buffer b) {  // for take_conversion_report
    ++block_fp8_converted_;
    block_fp8_convert_s_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return b;
  };
  std::vector<const BlockFp8Weight*> q;
  for (const TensorView& t : parts) {
    FS_CHECK(t.block_fp8 && t.shape.size() == 2 && t.shape[0] == t.block_fp8->rows &&
                 t.shape[1] == t.block_fp8->cols,
             "a block-wise FP8 weight's view and packed form disagree on its shape");
    q.push_back(t.block_fp8.get());
  }
  const int64_t k = q[0]->cols;
  auto packed = [&](const std::vector<const BlockFp8Weight*>& stack) {
    int64_t n = 0, blocks_n = 0;
    for (const BlockFp8Weight* p : stack) n += p->rows, blocks_n += p->scale_rows();
    const int64_t blocks_k = stack[0]->scale_cols(), ld = (blocks_k + 3) / 4 * 4;
    std::vector<float> scales(size_t(blocks_n * ld), 0.f);  // [blocks_n, ld]
    const size_t codes = align16(size_t(n * k));
    Buffer b;
    b.storage = allocate_bytes(codes + scales.size() * 4);
    char* const base = static_cast<char*>(b.storage.get());
    b.tensor = Tensor(base, DType::kF8E4M3, Device::kCuda, {n, k});
    b.tensor.block_scale = reinterpret_cast<const float*>(base + codes);
    b.tensor.block_n = int(stack[0]->block_rows);
    b.tensor.block_k = int(stack[0]->block_cols);
    b.tensor.block_scale_ld = int(ld);
    char* at = base;
    float* row_block = scales.data();
    for (const BlockFp8Weight* p : stack) {
      upload(at, p->codes, size_t(p->rows * k));
      at += p->rows * k;
      block_fp8_converted_bytes_ += double(p->rows * k + int64_t(p->scales.size()) * 4);
      for (int64_t r = 0; r < p->scale_rows(); ++r, row_block += ld)
        std::copy_n(p->scales.begin() + r * blocks_k, blocks_k, row_block);
    }
    upload(base + codes, scales.data(), scales.size() * 4);
    return b;
  };
  if (!block_fp8_stackable(q)) {
    int64_t rows = 0;
    for (const BlockFp8Weight* p : q) rows += p->rows;
    Buffer b = allocate(DType::kBF16, {rows, k});
    char* at = static_cast<char*>(b.tensor.data);
    for (const BlockFp8Weight* p : q) {
      const Buffer part = packed({p});
      const Tensor& w = part.tensor;
      cuda::block_fp8_dequantize_bf16(at, w.data, w.block_scale, w.block_scale_ld, int(p->rows),
                                      int(k), w.block_n, w.block_k, stream_);
      CUDA_CHECK(cudaStreamSynchronize(stream_));  // before `part` is freed
      at += size_t(p->rows * k) * 2;
    }
    return counted(std::move(b));
  }
  Buffer b = packed(q);
  const size_t scratch = size_t(b.tensor.numel()) * 2;
  if (scratch > fp8_scratch_bytes_) {
    fp8_scratch_ = nullptr;
    fp8_scratch_ = allocate_bytes(scratch);
    fp8_scratch_bytes_ = scratch;
  }
  ++block_fp8_weights_;
  return counted(std::move(b));
}

void CudaBackend::matmul_block_fp8(Tensor& out, const Tensor& x, const Tensor& w, int64_t m,
                                   int64_t n, int64_t k) {
  FS_CHECK(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "matmul out dtype ",
           dtype_name(out.dtype));
  if (m == 0) return;
  const bool out_f32 = out.dtype == DType::kF32;
  if (gemv_max_rows_ > 0 &&
      cuda::block_fp8_gemv_supported(int(m), int(k), w.block_k, x.data, w.data, out.data)) {
    cuda::block_fp8_gemv(out.data, out_f32, x.data, w.data, w.block_scale, w.block_scale_ld,
                         int(m), int(n), int(k), w.block_n, w.block_k, stream_);
    return;
  }
  if (matmul_block_fp8_gemm(out, x, w, m, n, k)) return;
  if (!block_fp8_fallback_said_) {
    std::fprintf(stderr, "flashserve: block-FP8 weight %lldx%lld (blocks %dx%d): no block-scaled "
                 "cuBLASLt GEMM for %lld rows on this GPU (it takes 128x128 blocks and n, k "
                 "multiples of 128); such steps dequantize the weight to bf16 and run the bf16 "
                 "GEMM (said once)\n", (long long)n, (long long)k, w.block_n, w.block_k,
                 (long long)m);
    block_fp8_fallback_said_ = true;
  }
  FS_CHECK(fp8_scratch_ && size_t(n * k) * 2 <= fp8_scratch_bytes_, "matmul: no scratch for the ",
           n, "x", k, " block-FP8 weight");
  cuda::block_fp8_dequantize_bf16(fp8_scratch_.get(), w.data, w.block_scale, w.block_scale_ld,
                                  int(n), int(k), w.block_n, w.block_k, stream_);
  const GemmPlan& plan = *gemm_plan(int(m), int(n), int(k), out.dtype, false);
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasLtMatmul(lt_, plan.desc, &alpha, fp8_scratch_.get(), plan.a, x.data, plan.b,
                              &beta, out.data, plan.c, out.data, plan.c, &plan.algo,
                              gemm_ws_.get(), kGemmWorkspaceBytes, stream_));
}

// x quantized per token per 128 columns into the scratch (codes [rows, k], then scales
// [k / 128, rows]), then cuBLASLt's E4M3 x E4M3 GEMM with the weight's BLK128x128_32F scales
// and x's VEC128_32F scales, fp32 accumulation. The GEMM takes the rows in multiples of 4 (x's
// scales are a column of `rows` floats per 128 columns, and each column must start 16-byte
// aligned); the last m % 4 rows run the skinny kernel. Rows go in chunks that fit the scratch.
// False, with nothing run, where the blocks are not 128x128, n or k is not a multiple of 128,
// the GPU has no FP8 tensor cores or cuBLASLt has no algorithm.
bool CudaBackend::matmul_block_fp8_gemm(Tensor& out, const Tensor& x, const Tensor& w, int64_t m,
                                        int64_t n, int64_t k) {
  if (!fp8_gemm_ || w.block_n != kLtBlock || w.block_k != kLtBlock || n % kLtBlock != 0 ||
      k % kLtBlock != 0 || !fp8_scratch_)
    return false;
  const int64_t rest = m % 4, whole = m - rest;
  const size_t out_row = size_t(n) * dtype_size(out.dtype);
  const void* x_rest = static_cast<const char*>(x.data) + whole * k * 2;
  void* out_rest = static_cast<char*>(out.data) + size_t(whole) * out_row;
  if (whole == 0 || (rest > 0 && !cuda::block_fp8_gemv_supported(int(rest), int(k), w.block_k,
                                                                   x_rest, w.data, out_rest)))
    return false;
  const int64_t blocks_k = k / kLtBlock;
  const auto scales_at = [k](int64_t rows) { return align16(size_t(rows * k)); };
  int64_t cap = int64_t(fp8_scratch_bytes_) / (k + 4 * blocks_k) - 16;
  cap -= cap > 16 ? cap % 16 : 0;
  const int64_t chunk = std::min(whole, cap);
  if (chunk < 4 || scales_at(chunk) + size_t(chunk * blocks_k) * 4 > fp8_scratch_bytes_)
    return false;
  auto* codes = static_cast<uint8_t*>(fp8_scratch_.get());
  auto* x_scale = reinterpret_cast<float*>(codes + scales_at(chunk));
  const GemmPlan* full =
      block_fp8_plan(int(chunk), int(n), int(k), out.dtype, w.block_scale, x_scale);
  const GemmPlan* tail = whole % chunk ? block_fp8_plan(int(whole % chunk), int(n), int(k),
                                                        out.dtype, w.block_scale, x_scale)
                                       : full;
  if (!full || !tail) return false;
  for (int64_t r = 0; r < whole; r += chunk) {
    const int64_t rows = std::min(chunk, whole - r);
    const GemmPlan& p = rows == chunk ? *full : *tail;
    // The plan is shared by every weight of this shape: this weight's scales go in per call.
    set_scale_pointers(p.desc, w.block_scale, x_scale);
    cuda::quantize_blocks_fp8(codes, x_scale, static_cast<const char*>(x.data) + r * k * 2,
                              int(rows), int(k), stream_);
    void* o = static_cast<char*>(out.data) + size_t(r) * out_row;
    const float alpha = 1.f, beta = 0.f;
    CUBLAS_CHECK(cublasLtMatmul(lt_, p.desc, &alpha, w.data, p.a, codes, p.b, &beta, o, p.c, o,
                                p.c, &p.algo, gemm_ws_.get(), kGemmWorkspaceBytes, stream_));
  }
  if (rest > 0)
    cuda::block_fp8_gemv(out_rest, out.dtype == DType::kF32, x_rest, w.data, w.block_scale,
                         w.block_scale_ld, int(rest), int(n), int(k), w.block_n, w.block_k,
                         stream_);
  return true;
}

// The cached plan of one block-scaled product (gemms_, keyed apart from gemm_plan's): outᵀ (n×m)
// = w (k×n, "T") · xᵀ (k×m), A's scales BLK128x128_32F ([n / 128] row blocks of k / 128 scales,
// leading dimension rounded up to 4), B's VEC128_32F ([k / 128] blocks of m scales, m a multiple
// of 4). The scale pointers must be set for the heuristic; matmul_block_fp8_gemm resets them per
// call. Null (remembered) where cuBLASLt has no algorithm.
const GemmPlan* CudaBackend::block_fp8_plan(int m, int n, int k, DType out_dtype,
                                            const float* w_scale, const float* x_scale) {
  const auto key = std::make_tuple(m, n, k, int(out_dtype) + 512);
  auto it = gemms_.find(key);
  if (it != gemms_.end()) return it->second.desc ? &it->second : nullptr;
  GemmPlan p;
  const cudaDataType_t ct = out_dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtMatmulMatrixScale_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                                    b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode,
                                              sizeof(a_mode)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode,
                                              sizeof(b_mode)));
  set_scale_pointers(p.desc, w_scale, x_scale);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, k, n, k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, k, m, k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, ct, n, m, n));
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kGemmWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    destroy(p);
    gemms_.emplace(key, GemmPlan{});
    return nullptr;
  }
  p.algo = res.algo;
  return &gemms_.emplace(key, p).first->second;
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
