// The CUDA backend's int4 weights (docs/QUANTIZATION.md): a loaded int4 projection
// (TensorView::int4) goes up as its checkpoint stores it and the GPU lays it out once in the
// layout of kernels/int4_gemv.h (kernels/int4_layout.h), a kI4 tensor; its
// matmuls run the int4 skinny kernel up to kInt4GemvMaxRows rows and the int4 GEMM above
// (act-order weights gather x into their column order first), or, for shapes neither takes,
// dequantize the weight into the bf16 scratch and run the bf16 cuBLASLt GEMM. Compiles to
// nothing unless FLASHSERVE_HAS_CUDA.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backends/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/int4_gemm.h"
#include "kernels/int4_gemv.h"
#include "kernels/int4_layout.h"
#include "weights/int4_weights.h"

namespace flashserve {

// Int4 parts that stack (one projection, or q/k/v or gate/up with one permutation) load packed;
// the others (act-order checkpoints give each projection its own permutation) become one bf16
// weight. Act-order's gathered x grows here, at load, so that no step (nor a recorded graph)
// ever reallocates it.
Buffer CudaBackend::load_int4_weight(std::span<const TensorView> parts) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<const Int4Stored*> int4;
  for (const TensorView& t : parts) {
    FS_CHECK(t.int4 && t.shape.size() == 2 && t.shape[0] == t.int4->rows &&
                 t.shape[1] == t.int4->cols,
             "an int4 weight's view and packed form disagree on its shape");
    int4.push_back(t.int4.get());
  }
  Buffer b;
  if (int4_stackable(int4)) {
    b = lay_out_int4(int4);
    const size_t x_bytes = size_t(cuda::kInt4GemvMaxRows) * b.tensor.dim(1) * 2;
    if (b.tensor.int4.perm && x_bytes > int4_x_bytes_) {
      int4_x_ = nullptr;
      int4_x_ = allocate_bytes(x_bytes);
      int4_x_bytes_ = x_bytes;
    }
    ++int4_weights_;
  } else {
    b = int4_as_bf16(int4);
  }
  ++int4_converted_;
  int4_convert_s_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return b;
}

// One allocation: codes, scales, zeros and (act-order) the permutation, each 16-byte aligned.
// The parts go up as their checkpoint stores them, through the bf16 scratch (grown here first:
// idle while loading; it grows to the largest int4 weight, which larger steps dequantize into),
// and the GPU writes each part's rows of the layout: int4_layout_codes for the codes, strided
// copies for its columns of the group-major scales and zero points.
Buffer CudaBackend::lay_out_int4(const std::vector<const Int4Stored*>& int4) {
  const Int4Stored& first = *int4[0];
  int64_t rows = 0;
  for (const Int4Stored* p : int4) rows += p->rows;
  const int n = int(rows), k = int(first.cols), group_size = int(first.group_size);
  const int groups = k / group_size, row_bytes = cuda::int4_row_bytes(k);
  const size_t codes = align16(size_t(n) * row_bytes), scales = align16(size_t(groups) * n * 4),
               zeros = align16(size_t(groups) * n), perm = first.perm.size() * 4;
  size_t staging = size_t(n) * k * 2;  // the scratch's size for this weight, at least
  for (const Int4Stored* p : int4)
    staging = std::max(staging, align16(p->word_bytes()) + align16(p->scales.size() * 4) +
                                    p->zeros.size());
  if (staging > fp8_scratch_bytes_) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier weights' staging has been read
    fp8_scratch_ = nullptr;
    fp8_scratch_ = allocate_bytes(staging);
    fp8_scratch_bytes_ = staging;
  }
  Buffer b;
  b.storage = allocate_bytes(codes + scales + zeros + perm);
  char* base = static_cast<char*>(b.storage.get());
  b.tensor = Tensor(base, DType::kI4, Device::kCuda, {rows, first.cols});
  b.tensor.int4.scales = reinterpret_cast<const float*>(base + codes);
  b.tensor.int4.zeros = reinterpret_cast<const uint8_t*>(base + codes + scales);
  b.tensor.int4.perm = perm ? reinterpret_cast<const int32_t*>(base + codes + scales + zeros)
                            : nullptr;
  b.tensor.int4.group_size = group_size;
  if (perm) upload(base + codes + scales + zeros, first.perm.data(), perm);
  char* words = static_cast<char*>(fp8_scratch_.get());
  int64_t row0 = 0;
  for (const Int4Stored* p : int4) {
    // Stream order keeps each part's staging until the previous part's kernel and copies ran.
    char* part_scales = words + align16(p->word_bytes());
    char* part_zeros = part_scales + align16(p->scales.size() * 4);
    upload(words, p->words, p->word_bytes());
    upload(part_scales, p->scales.data(), p->scales.size() * 4);
    upload(part_zeros, p->zeros.data(), p->zeros.size());
    cuda::int4_layout_codes(reinterpret_cast<uint8_t*>(base) + size_t(row0) * row_bytes,
                            reinterpret_cast<const uint32_t*>(words), p->packing,
                            b.tensor.int4.perm, int(p->rows), k, stream_);
    CUDA_CHECK(cudaMemcpy2DAsync(base + codes + size_t(row0) * 4, size_t(n) * 4, part_scales,
                                 size_t(p->rows) * 4, size_t(p->rows) * 4, size_t(groups),
                                 cudaMemcpyDeviceToDevice, stream_));
    CUDA_CHECK(cudaMemcpy2DAsync(base + codes + scales + size_t(row0), size_t(n), part_zeros,
                                 size_t(p->rows), size_t(p->rows), size_t(groups),
                                 cudaMemcpyDeviceToDevice, stream_));
    row0 += p->rows;
    int4_converted_bytes_ += double(p->word_bytes() + p->scales.size() * 4 + p->zeros.size());
  }
  return b;
}

// Each part laid out alone, then dequantized into its rows (int4_dequantize_bf16: every value
// rounded once, the bf16 weight its f32 values would give).
Buffer CudaBackend::int4_as_bf16(const std::vector<const Int4Stored*>& int4) {
  int64_t rows = 0;
  for (const Int4Stored* p : int4) {
    FS_CHECK(p && p->cols == int4[0]->cols, "int4 weights of different columns cannot be stacked");
    rows += p->rows;
  }
  const int64_t k = int4[0]->cols;
  Buffer b = allocate(DType::kBF16, {rows, k});
  char* at = static_cast<char*>(b.tensor.data);
  for (const Int4Stored* p : int4) {
    const Buffer part = lay_out_int4({p});
    const Int4Params& q = part.tensor.int4;
    cuda::int4_dequantize_bf16(at, static_cast<const uint8_t*>(part.tensor.data), q.scales,
                               q.zeros, q.perm, int(p->rows), int(k), q.group_size, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // before `part` is freed
    at += size_t(p->rows * k) * 2;
  }
  return b;
}

// The GPU work queued by the loads is part of their time: waited for here (and counted for
// each kind loaded; a checkpoint holds one). One line per kind, joined by "; ".
std::string CudaBackend::take_conversion_report() {
  if (fp8_quantizer_) fp8_quantizer_->check();  // the last weight quantized on the GPU
  if (int4_converted_ == 0 && block_fp8_converted_ == 0) return "";
  const auto start = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  const double wait =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto line = [wait](int64_t n, const char* kind, double bytes, const char* done,
                           double load_s) {
    const double s = load_s + wait;
    char text[200];
    std::snprintf(text, sizeof text, "%lld %s weights (%.2f GB as stored) %s in %.2f s (%.1f GB/s)",
                  static_cast<long long>(n), kind, bytes / 1e9, done, s,
                  bytes / 1e9 / std::max(s, 1e-9));
    return std::string(text);
  };
  std::string report;
  if (int4_converted_ > 0)
    report = line(int4_converted_, "int4", int4_converted_bytes_,
                  "uploaded and laid out on the GPU", int4_convert_s_);
  if (block_fp8_converted_ > 0)
    report += (report.empty() ? "" : "; ") +
              line(block_fp8_converted_, "block-FP8", block_fp8_converted_bytes_,
                   "uploaded to the GPU", block_fp8_convert_s_);
  int4_converted_ = 0, int4_convert_s_ = 0, int4_converted_bytes_ = 0;
  block_fp8_converted_ = 0, block_fp8_convert_s_ = 0, block_fp8_converted_bytes_ = 0;
  return report;
}

// The skinny kernel up to kInt4GemvMaxRows rows, the int4 GEMM above up to kInt4GemmMaxRows
// (unless gemv_max_rows is 0:
// the all-cuBLASLt baseline), else the weight dequantized to bf16 and the bf16 GEMM. Act-order x
// is gathered into int4_x_ (grown at load for the skinny kernel's rows) or, for the GEMM's, into
// the bf16 scratch, which the GEMM leaves unused and which holds the largest int4 weight; steps
// whose gathered x would not fit it take the dequantizing path.
void CudaBackend::matmul_int4(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n,
                              int64_t k) {
  FS_CHECK(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "matmul out dtype ",
           dtype_name(out.dtype));
  if (m == 0) return;
  const Int4Params& p = w.int4;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const bool out_f32 = out.dtype == DType::kF32;
  const size_t x_bytes = size_t(m * k) * 2;
  const bool gemv = gemv_max_rows_ > 0 &&
                    cuda::int4_gemv_supported(int(m), int(k), p.group_size, x.data, out.data);
  const bool gemm =
      gemv_max_rows_ > 0 && m > cuda::kInt4GemvMaxRows && m <= cuda::kInt4GemmMaxRows &&
      cuda::int4_gemm_supported(int(m), int(n), int(k), p.group_size, x.data, out.data) &&
      (!p.perm || (fp8_scratch_ && x_bytes <= fp8_scratch_bytes_));
  if (gemv || gemm) {
    const void* xs = x.data;
    if (p.perm) {
      void* gathered = gemv ? int4_x_.get() : fp8_scratch_.get();
      FS_CHECK(gathered && (!gemv || x_bytes <= int4_x_bytes_), "matmul: no int4 gather buffer");
      cuda::int4_gather_columns(gathered, x.data, p.perm, int(m), int(k), stream_);
      xs = gathered;
    }
    if (gemv)
      cuda::int4_gemv(out.data, out_f32, xs, codes, p.scales, p.zeros, int(m), int(n), int(k),
                      p.group_size, stream_);
    else
      cuda::int4_gemm(out.data, out_f32, xs, codes, p.scales, p.zeros, int(m), int(n), int(k),
                      p.group_size, stream_);
    return;
  }
  FS_CHECK(fp8_scratch_ && size_t(n * k) * 2 <= fp8_scratch_bytes_, "matmul: no scratch for the ",
           n, "x", k, " int4 weight");
  cuda::int4_dequantize_bf16(fp8_scratch_.get(), codes, p.scales, p.zeros, p.perm, int(n), int(k),
                             p.group_size, stream_);
  const GemmPlan& plan = *gemm_plan(int(m), int(n), int(k), out.dtype, false);
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasLtMatmul(lt_, plan.desc, &alpha, fp8_scratch_.get(), plan.a, x.data, plan.b,
                              &beta, out.data, plan.c, out.data, plan.c, &plan.algo,
                              gemm_ws_.get(), kGemmWorkspaceBytes, stream_));
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
