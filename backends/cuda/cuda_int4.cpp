// The CUDA backend's int4 weights (docs/QUANTIZATION.md): a loaded int4 projection
// (TensorView::int4) goes up once in the layout of kernels/int4_gemv.h as a kI4 tensor, and its
// matmuls run the int4 skinny kernel up to kInt4GemvMaxRows rows (act-order weights gather x into
// their column order first), or, above, dequantize the weight into the bf16 scratch and run the
// bf16 cuBLASLt GEMM. Compiles to nothing unless FLASHSERVE_HAS_CUDA.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include "backends/cuda/cuda_backend.h"
#include "kernels/int4_gemv.h"
#include "weights/int4_weights.h"

namespace flashserve {

namespace {
size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }
}  // namespace

// One allocation: codes, scales, zeros and (act-order) the permutation, each 16-byte aligned. The
// bf16 scratch that larger steps dequantize into, and act-order's gathered x, grow here, at
// load, so that no step (nor a recorded graph) ever reallocates them.
Buffer CudaBackend::load_int4_weight(const TensorView& w) {
  const Int4Weight& q = *w.int4;
  FS_CHECK(w.shape.size() == 2 && w.shape[0] == q.rows && w.shape[1] == q.cols,
           "an int4 weight's view and packed form disagree on its shape");
  const int n = int(q.rows), k = int(q.cols), group_size = int(q.group_size);
  const cuda::Int4GpuLayout l = cuda::int4_gpu_layout(q.packed.data(), q.scales.data(),
                                                      q.zeros.data(), n, k, group_size);
  const size_t codes = align16(l.codes.size()), scales = align16(l.scales.size() * 4),
               zeros = align16(l.zeros.size()), perm = q.perm.size() * 4;
  Buffer b;
  b.storage = allocate_bytes(codes + scales + zeros + perm);
  char* base = static_cast<char*>(b.storage.get());
  b.tensor = Tensor(base, DType::kI4, Device::kCuda, {q.rows, q.cols});
  b.tensor.int4.scales = reinterpret_cast<const float*>(base + codes);
  b.tensor.int4.zeros = reinterpret_cast<const uint8_t*>(base + codes + scales);
  b.tensor.int4.perm = perm ? reinterpret_cast<const int32_t*>(base + codes + scales + zeros)
                            : nullptr;
  b.tensor.int4.group_size = group_size;
  upload(base, l.codes.data(), l.codes.size());
  upload(base + codes, l.scales.data(), l.scales.size() * 4);
  upload(base + codes + scales, l.zeros.data(), l.zeros.size());
  if (perm) upload(base + codes + scales + zeros, q.perm.data(), perm);
  if (size_t(n) * k * 2 > fp8_scratch_bytes_) {
    fp8_scratch_ = nullptr;
    fp8_scratch_ = allocate_bytes(size_t(n) * k * 2);
    fp8_scratch_bytes_ = size_t(n) * k * 2;
  }
  const size_t x_bytes = size_t(cuda::kInt4GemvMaxRows) * k * 2;
  if (perm && x_bytes > int4_x_bytes_) {
    int4_x_ = nullptr;
    int4_x_ = allocate_bytes(x_bytes);
    int4_x_bytes_ = x_bytes;
  }
  ++int4_weights_;
  return b;
}

// The skinny kernel up to kInt4GemvMaxRows rows (whatever gemv_max_rows says, unless it is 0:
// the all-cuBLASLt baseline), else the weight dequantized to bf16 and the bf16 GEMM. A
// Marlin-style mixed-input GEMM that reads the codes in its tiles is the step after this one.
void CudaBackend::matmul_int4(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n,
                              int64_t k) {
  FS_CHECK(out.dtype == DType::kF32 || out.dtype == DType::kBF16, "matmul out dtype ",
           dtype_name(out.dtype));
  if (m == 0) return;
  const Int4Params& p = w.int4;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const bool out_f32 = out.dtype == DType::kF32;
  if (gemv_max_rows_ > 0 && cuda::int4_gemv_supported(int(m), int(k), p.group_size, x.data, out.data)) {
    const void* xs = x.data;
    if (p.perm) {
      FS_CHECK(int4_x_ && size_t(m * k) * 2 <= int4_x_bytes_, "matmul: no int4 gather buffer");
      cuda::int4_gather_columns(int4_x_.get(), x.data, p.perm, int(m), int(k), stream_);
      xs = int4_x_.get();
    }
    cuda::int4_gemv(out.data, out_f32, xs, codes, p.scales, p.zeros, int(m), int(n), int(k),
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
