// The CUDA backend: weights and activations bf16 on one GPU, logits f32. Linear layers through
// cuBLASLt (bf16 inputs, fp32 accumulation; one descriptor set + heuristic per shape, cached;
// workspace allocated once); attention through the FlashAttention-2 prefill kernel (any step
// with a chunk longer than 1) or split-K decode (every chunk of length 1; cascade attention when
// the step's sequences share leading blocks), for head_dim 64/128;
// other head dims (stories260K has 8) go through a generic fp32 kernel, named in name().
// FP8 weights (docs/FP8.md) stay FP8 on the device (a byte per weight + a scale per row): the
// skinny kernels read them directly, larger steps dequantize into a bf16 scratch for cuBLASLt.
// Elementwise ops are backends/cuda/ops.cu. Everything runs on one stream; host copies
// synchronise it. Compiles to the no-CUDA stubs unless FLASHSERVE_HAS_CUDA.
#include <string>

#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cuda/ops.h"
#include "kernels/attention_cascade.h"
#include "kernels/attention_decode.h"
#include "kernels/attention_prefill.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda_ops.h"
#include "kernels/prefill_plan.h"
#include "sampling/sample_pack.h"

#define CUBLAS_CHECK(expr)                                                               \
  do {                                                                                   \
    cublasStatus_t fs_st_ = (expr);                                                      \
    if (fs_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::flashserve::throw_error(__FILE__, __LINE__, #expr, " failed: cublas status ",    \
                                int(fs_st_));                                            \
  } while (0)

namespace flashserve {
namespace {

constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;
// Left free after the weights for activations, cuBLASLt, attention workspaces and the CUDA
// context's own growth; the KV cache may take a fraction of the rest.
constexpr size_t kReserveBytes = size_t(1) << 30;

bool fast_attention_head_dim(int d) { return d == 64 || d == 128; }

// One cuBLASLt matmul configuration: row-major out[m, n] = x[m, k] · w[n, k]ᵀ, computed in the
// column-major view as outᵀ (n×m) = w (k×n)ᵀ · xᵀ (k×m).
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, int gemv_max_rows)
      : device_(device), gemv_max_rows_(gemv_max_rows < 0 ? cuda::kGemvDefaultRows : gemv_max_rows) {
    FS_CHECK(gemv_max_rows_ <= cuda::kGemvMaxRows, "gemv_max_rows ", gemv_max_rows, " > ",
             cuda::kGemvMaxRows);
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    FS_CHECK(err == cudaSuccess && count > 0, "backend 'cuda': no CUDA device available (",
             cudaGetErrorString(err), ")");
    FS_CHECK(device >= 0 && device < count, "CUDA device ", device, " of ", count);
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasLtCreate(&lt_));
    gemm_ws_ = allocate_bytes(kGemmWorkspaceBytes);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    gpu_name_ = prop.name;
    const char* fp8_gemm = std::getenv("FLASHSERVE_FP8_GEMM");
    fp8_gemm_ = (prop.major > 8 || (prop.major == 8 && prop.minor >= 9)) &&
                (fp8_gemm == nullptr || std::strcmp(fp8_gemm, "0") != 0);
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    for (auto& [key, p] : gemms_) destroy(p);
    cublasLtDestroy(lt_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override {
    return "cuda (" + gpu_name_ + ", bf16, cuBLASLt + skinny-matmul kernel for up to " +
           std::to_string(gemv_max_rows_) + " rows" + (fuse_ ? ", fused add + norm" : "") +
           "; attention: FA2 prefill + split-K decode " +
           "for head_dim 64/128, generic fp32 kernel otherwise)";
  }
  Device device() const override { return Device::kCuda; }
  DType compute_dtype() const override { return DType::kBF16; }
  size_t memory_available() const override {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b > kReserveBytes ? free_b - kReserveBytes : 0;
  }

  std::shared_ptr<void> allocate_bytes(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 256));
    if (err != cudaSuccess) {
      cudaGetLastError();  // reset the last-error slot (an allocation failure is not sticky)
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      FS_THROW("out of GPU memory allocating ", bytes, " bytes (", free_b, " of ", total_b,
               " bytes free): ", cudaGetErrorString(err));
    }
    return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  }

  Buffer load_weight(const TensorView& w) override {
    FS_CHECK(w.shape.size() >= 1 && w.shape.size() <= 4 && w.data, "bad weight view");
    if (w.dtype == DType::kF8E4M3) return load_fp8_weight(w);
    const int64_t n = w.numel();
    Buffer b = allocate(DType::kBF16, {n});
    b.tensor.ndim = int(w.shape.size());
    for (int i = 0; i < b.tensor.ndim; ++i) b.tensor.shape[i] = w.shape[i];
    if (w.dtype == DType::kBF16) {
      CUDA_CHECK(cudaMemcpy(b.tensor.data, w.data, size_t(n) * 2, cudaMemcpyHostToDevice));
      return b;
    }
    // f32 goes up as is; f16 is widened on the host first. The GPU rounds to bf16.
    std::vector<float> widened;
    const float* src = static_cast<const float*>(w.data);
    if (w.dtype == DType::kF16) {
      widened.resize(size_t(n));
      const uint16_t* in = static_cast<const uint16_t*>(w.data);
      for (int64_t i = 0; i < n; ++i) widened[i] = f16_bits_to_float(in[i]);
      src = widened.data();
    } else {
      FS_CHECK(w.dtype == DType::kF32, "weights of dtype ", dtype_name(w.dtype),
               " are not supported");
    }
    std::shared_ptr<void> tmp = allocate_bytes(size_t(n) * 4);
    CUDA_CHECK(cudaMemcpyAsync(tmp.get(), src, size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
    cuda::f32_to_bf16(b.tensor.data, static_cast<const float*>(tmp.get()), n, stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return b;
  }

  void copy_from_host(Tensor dst, const void* src) override {
    if (dst.bytes())
      CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    if (src.bytes())
      CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* native_stream() override { return stream_; }

  void embedding(Tensor out, const Tensor& ids, const Tensor& table) override {
    expect_bf16(out, "embedding out");
    expect_bf16(table, "embedding table");
    FS_CHECK(out.numel() == ids.numel() * table.dim(1), "embedding: out has ", out.numel(),
             " elements");
    cuda::embedding_bf16(out.data, ids.as<int32_t>(), table.data, int(ids.numel()),
                         int(table.dim(1)), int(table.dim(0)), stream_);
  }

  void rms_norm(Tensor out, const Tensor& x, const Tensor& w, float eps) override {
    expect_bf16(out, "rms_norm out");
    expect_bf16(x, "rms_norm x");
    const int64_t hidden = w.numel();
    FS_CHECK(x.numel() == out.numel() && hidden > 0 && x.numel() % hidden == 0,
             "rms_norm: shapes");
    cuda::rms_norm_bf16(out.data, x.data, w.data, int(x.numel() / hidden), int(hidden), eps,
                        stream_);
  }

  // FP8 weights (docs/FP8.md): the skinny kernels read the codes up to kGemvMaxRows rows
  // (whatever gemv_max_rows says, unless it is 0: the all-cuBLASLt baseline); larger steps
  // quantize x per row and run cuBLASLt's FP8 GEMM (matmul_fp8_gemm), or, where that is off or
  // has no algorithm, dequantize the weight into a bf16 scratch buffer and run the bf16 GEMM.
  void matmul(Tensor out, const Tensor& x, const Tensor& w) override {
    expect_bf16(x, "matmul x");
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
  // with nothing run, where it is off (FLASHSERVE_FP8_GEMM=0, or no FP8 tensor cores) or cuBLASLt
  // has no algorithm for the shape.
  bool matmul_fp8_gemm(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n,
                       int64_t k) {
    if (!fp8_gemm_ || k % 16 != 0 || n % 16 != 0 || !fp8_scratch_) return false;
    const auto scales_at = [k](int64_t rows) { return (size_t(rows * k) + 15) / 16 * 16; };
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

  void argmax_rows(Tensor ids, const Tensor& logits) override {
    FS_CHECK(logits.dtype == DType::kF32 && ids.dtype == DType::kI32 && logits.ndim == 2 &&
                 ids.numel() == logits.dim(0),
             "argmax_rows: shapes");
    cuda::argmax_rows_f32(ids.as<int32_t>(), logits.as<float>(), int(logits.dim(0)),
                          int(logits.dim(1)), stream_);
  }

  // Packs the requests on the host (sampling/sample_pack.h), uploads them in one copy and runs
  // one block per row (kernels/cuda/sampling.cu); only the ids come back.
  void sample_rows(int32_t* ids, const Tensor& logits, std::span<const int64_t> rows,
                   std::span<const SampleRequest> requests) override {
    FS_CHECK(logits.dtype == DType::kF32 && logits.ndim == 2 && rows.size() == requests.size(),
             "sample_rows: shapes");
    const int n = int(rows.size()), vocab = int(logits.dim(1));
    if (n == 0) return;
    for (int64_t r : rows)
      FS_CHECK(r >= 0 && r < logits.dim(0), "sample_rows: row ", r, " of ", logits.dim(0));
    const SamplePack& pack = packer_.pack(rows, requests, vocab);
    auto align = [](size_t b) { return (b + 15) / 16 * 16; };
    const size_t args_b = align(pack.rows.size() * sizeof(SampleRowArgs));
    const size_t edits_b = align(pack.edits.size() * sizeof(TokenEdit));
    const size_t bias_b = align(pack.biases.size() * sizeof(float));
    const size_t work_b = align(size_t(n) * vocab * 4), alive_b = align(size_t(n) * vocab);
    const size_t in_b = args_b + edits_b + bias_b, total = in_b + work_b + alive_b + size_t(n) * 4;
    if (total > sample_ws_bytes_) {
      sample_ws_ = nullptr;
      sample_ws_ = allocate_bytes(total + total / 2);
      sample_ws_bytes_ = total + total / 2;
    }
    sample_in_.assign(in_b, 0);
    std::memcpy(sample_in_.data(), pack.rows.data(), pack.rows.size() * sizeof(SampleRowArgs));
    std::memcpy(sample_in_.data() + args_b, pack.edits.data(),
                pack.edits.size() * sizeof(TokenEdit));
    std::memcpy(sample_in_.data() + args_b + edits_b, pack.biases.data(),
                pack.biases.size() * sizeof(float));
    char* ws = static_cast<char*>(sample_ws_.get());
    CUDA_CHECK(cudaMemcpyAsync(ws, sample_in_.data(), in_b, cudaMemcpyHostToDevice, stream_));
    int32_t* d_ids = reinterpret_cast<int32_t*>(ws + in_b + work_b + alive_b);
    cuda::sample_rows_f32(d_ids, reinterpret_cast<float*>(ws + in_b),
                          reinterpret_cast<uint8_t*>(ws + in_b + work_b), logits.as<float>(),
                          reinterpret_cast<const SampleRowArgs*>(ws),
                          reinterpret_cast<const TokenEdit*>(ws + args_b),
                          reinterpret_cast<const float*>(ws + args_b + edits_b), n, vocab, stream_);
    CUDA_CHECK(cudaMemcpyAsync(ids, d_ids, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }

  void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) override {
    expect_bf16(q, "rope q");
    expect_bf16(k, "rope k");
    FS_CHECK(q.ndim == 3 && k.ndim == 3 && q.dim(2) == k.dim(2) &&
                 inv_freq.numel() * 2 == q.dim(2),
             "rope: shapes");
    cuda::rope_bf16(q.data, k.data, positions.as<int32_t>(), inv_freq.as<float>(),
                    int(q.dim(0)), int(q.dim(1)), int(k.dim(1)), int(q.dim(2)), stream_);
  }

  void swiglu(Tensor out, const Tensor& gate, const Tensor& up) override {
    FS_CHECK(out.numel() == gate.numel() && gate.numel() == up.numel(), "swiglu: shapes");
    cuda::swiglu_bf16(out.data, gate.data, up.data, out.numel(), stream_);
  }

  void add(Tensor out, const Tensor& a, const Tensor& b) override {
    FS_CHECK(out.numel() == a.numel() && a.numel() == b.numel(), "add: shapes");
    cuda::add_bf16(out.data, a.data, b.data, out.numel(), stream_);
  }

  void gather_rows(Tensor out, const Tensor& x, const Tensor& row_ids) override {
    FS_CHECK(out.dtype == x.dtype && out.ndim >= 1 && x.ndim >= 1 &&
                 out.numel() / out.dim(0) == x.numel() / x.dim(0) &&
                 row_ids.numel() == out.dim(0),
             "gather_rows: shapes");
    const int64_t row_bytes = out.dim(0) ? int64_t(out.bytes()) / out.dim(0) : 0;
    cuda::gather_rows(out.data, x.data, row_ids.as<int32_t>(), int(out.dim(0)), int(row_bytes),
                      stream_);
  }

  void write_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v,
                const Tensor& slots) override {
    expect_bf16(k_cache, "k_cache");
    FS_CHECK(k.ndim == 3 && k.numel() == v.numel() && slots.numel() == k.dim(0),
             "write_kv: shapes");
    cuda::write_kv_bf16(k_cache.data, v_cache.data, k.data, v.data, slots.as<int32_t>(),
                        int(k.dim(0)), int(k.dim(1)), int(k.dim(2)), stream_);
  }

  void add_bias(Tensor x, const Tensor& bias) override {
    expect_bf16(x, "add_bias x");
    expect_bf16(bias, "add_bias bias");
    const int64_t width = bias.numel();
    FS_CHECK(width > 0 && x.numel() % width == 0, "add_bias: x has ", x.numel(),
             " elements, bias ", width);
    cuda::add_bias_bf16(x.data, bias.data, int(x.numel() / width), int(width), stream_);
  }

  void qk_norm(Tensor qkv, const Tensor& q_weight, const Tensor& k_weight, int num_q_heads,
               int num_kv_heads, float eps) override {
    expect_bf16(qkv, "qk_norm qkv");
    expect_bf16(q_weight, "qk_norm q_weight");
    expect_bf16(k_weight, "qk_norm k_weight");
    FS_CHECK(qkv.ndim == 3 && qkv.dim(1) == num_q_heads + 2 * num_kv_heads &&
                 q_weight.numel() == qkv.dim(2) && k_weight.numel() == qkv.dim(2),
             "qk_norm: shapes");
    cuda::qk_norm_bf16(qkv.data, q_weight.data, k_weight.data, int(qkv.dim(0)), num_q_heads,
                       num_kv_heads, int(qkv.dim(2)), eps, stream_);
  }

  void add_rms_norm(Tensor out, Tensor x, const Tensor& delta, const Tensor& w,
                    float eps) override {
    expect_bf16(out, "add_rms_norm out");
    expect_bf16(x, "add_rms_norm x");
    expect_bf16(delta, "add_rms_norm delta");
    const int64_t hidden = w.numel();
    FS_CHECK(x.numel() == out.numel() && x.numel() == delta.numel() && hidden > 0 &&
                 x.numel() % hidden == 0,
             "add_rms_norm: shapes");
    cuda::add_rms_norm_bf16(out.data, x.data, delta.data, w.data, int(x.numel() / hidden),
                            int(hidden), eps, stream_);
  }

  void qkv_rope_write_kv(Tensor q, Tensor k_cache, Tensor v_cache, const Tensor& qkv,
                         const Tensor& positions, const Tensor& inv_freq,
                         const Tensor& slot_mapping) override {
    expect_bf16(q, "qkv_rope_write_kv q");
    expect_bf16(qkv, "qkv_rope_write_kv qkv");
    expect_bf16(k_cache, "k_cache");
    FS_CHECK(q.ndim == 3 && k_cache.ndim == 4, "qkv_rope_write_kv: shapes");
    const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k_cache.dim(2);
    FS_CHECK(qkv.numel() == n * (hq + 2 * hkv) * d && positions.numel() == n &&
                 slot_mapping.numel() == n && inv_freq.numel() * 2 == d && k_cache.dim(3) == d,
             "qkv_rope_write_kv: shapes");
    // The prefill launcher's contiguous path (its default where the Hopper kernel runs;
    // FLASHSERVE_PREFILL_KV=paged turns it off): a multi-token step also keeps
    // its turned K rows, so the paged_attention that follows can give the prefill kernel this
    // step's own K/V (K from here, V straight from qkv) for its fresh prompts. Never while a graph
    // is recorded: the buffer may move.
    fresh_ = {};
    void* k_rows = nullptr;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (n > 1 && cuda::detail::prefill_kv_contig_selected() &&
        cudaStreamIsCapturing(stream_, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone) {
      const size_t bytes = size_t(n) * hkv * d * 2;
      if (bytes > fresh_k_bytes_) fresh_k_ = allocate_bytes(bytes), fresh_k_bytes_ = bytes;
      k_rows = fresh_k_.get();
      fresh_ = cuda::FreshKv{.k = k_rows,
                             .v = static_cast<const char*>(qkv.data) + (hq + hkv) * d * 2,
                             .k_row_stride = hkv * d,
                             .v_row_stride = (hq + 2 * hkv) * d};
      fresh_tokens_ = n;
    }
    cuda::qkv_rope_write_kv_bf16(q.data, k_cache.data, v_cache.data, qkv.data,
                                 positions.as<int32_t>(), inv_freq.as<float>(),
                                 slot_mapping.as<int32_t>(), int(n), int(hq), int(hkv), int(d),
                                 stream_, k_rows);
  }

  void swiglu_fused(Tensor out, const Tensor& gate_up) override {
    expect_bf16(out, "swiglu_fused out");
    expect_bf16(gate_up, "swiglu_fused gate_up");
    const int64_t inter = out.dim(out.ndim - 1), n = out.numel() / std::max<int64_t>(inter, 1);
    FS_CHECK(gate_up.numel() == 2 * n * inter, "swiglu_fused: shapes");
    cuda::swiglu_fused_bf16(out.data, gate_up.data, int(n), int(inter), stream_);
  }

  // One skinny-matmul kernel with the add + norm in front where that measured faster
  // (cuda::gemv_add_rms_norm_pays), else the add + norm kernel and the matmul.
  void add_rms_norm_matmul(Tensor out, Tensor h, Tensor x_out, const Tensor& x, const Tensor& delta,
                           const Tensor& norm_w, float eps, const Tensor& w) override {
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
    if (fuse_ && m <= gemv_max_rows_ && w.dtype == DType::kBF16 &&
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

  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const StepArgs& b, float scale) override {
    expect_bf16(q, "attention q");
    FS_CHECK(q.ndim == 3 && k_cache.ndim == 4, "paged_attention: shapes");
    const PagedAttentionArgs a =
        paged_attention_args(b, int(q.dim(1)), int(k_cache.dim(2)), int(q.dim(2)), scale);
    // The rows kept by the qkv_rope_write_kv of this step, if any (valid for this call only).
    const cuda::FreshKv fresh = std::exchange(fresh_, cuda::FreshKv{});
    // ...and only where they pay (kernels/prefill_plan.h): mostly fresh prompts of a tile or more.
    const bool have_fresh = fresh.k != nullptr && fresh_tokens_ == b.num_tokens &&
                            b.host_cu_q_lens != nullptr &&
                            prefill_fresh_kv_pays(b.host_cu_q_lens, b.host_kv_lens, b.num_seqs);
    switch (attention_path(b, a)) {
      case AttentionPath::kGeneric:
        cuda::paged_attention_generic_bf16(a, b.num_tokens, q.data, k_cache.data, v_cache.data,
                                           out.data, stream_, generic_kv_len(b.max_kv_len, a.head_dim));
        return;
      case AttentionPath::kDecode: {
        if (b.cascade.active()) {  // shared prefixes read once per group
          const CascadeAttentionArgs c = cascade_attention_args(b, a.num_q_heads, a.num_kv_heads,
                                                                a.head_dim, scale);
          const DecodePlan& plan = decode_plan(b.cascade.host_suffix_kv_lens, a);
          ensure_cascade_workspace(c, plan);
          cuda::attention_cascade(c, q.data, k_cache.data, v_cache.data, out.data, DType::kBF16,
                                  plan, cascade_ws_.get(), cascade_ws_bytes_, stream_);
          return;
        }
        const DecodePlan& plan = decode_plan(b.host_kv_lens, a);
        ensure_decode_workspace(a, plan);
        cuda::attention_decode(a, q.data, k_cache.data, v_cache.data, out.data, nullptr,
                               DType::kBF16, plan, decode_ws_.get(), decode_ws_bytes_, stream_);
        return;
      }
      case AttentionPath::kPrefill:
        cuda::attention_prefill(a, b.num_tokens, q.data, k_cache.data, v_cache.data, out.data,
                                nullptr, DType::kBF16, stream_, have_fresh ? &fresh : nullptr);
        return;
    }
  }

  // ---- CUDA graphs -------------------------------------------------------------------------
  // The key packs the attention path with what it decided from host data: the generic kernel's
  // shared-memory length, or the split-K plan (splits, chunk length, kv heads per block).
  bool graph_launch_key(const StepArgs& b, int num_q_heads, int num_kv_heads, int head_dim,
                        uint64_t* key) override {
    const PagedAttentionArgs a = paged_attention_args(b, num_q_heads, num_kv_heads, head_dim);
    const AttentionPath path = attention_path(b, a);
    uint64_t k = uint64_t(path);
    if (path == AttentionPath::kGeneric) {
      k |= uint64_t(generic_kv_len(b.max_kv_len, a.head_dim)) << 8;
    } else if (path == AttentionPath::kDecode) {
      const bool cascade = b.cascade.active();  // its shape is in the model's graph key
      const DecodePlan& plan = decode_plan(cascade ? b.cascade.host_suffix_kv_lens : b.host_kv_lens, a);
      if (cascade)  // never allocate while recording
        ensure_cascade_workspace(cascade_attention_args(b, num_q_heads, num_kv_heads, head_dim, 0.f), plan);
      else
        ensure_decode_workspace(a, plan);
      FS_CHECK(plan.num_splits < 256 && plan.chunk_len < (1 << 28) && plan.kv_heads_per_block < 16,
               "decode plan out of the graph key's range");
      k |= uint64_t(plan.num_splits) << 8;
      k |= uint64_t(plan.num_splits == 1 ? 0 : plan.chunk_len) << 16;
      k |= uint64_t(plan.kv_heads_per_block) << 44;
    }
    *key = k;
    return true;
  }
  uint64_t graph_epoch() const override { return epoch_; }
  void begin_capture() override {
    // Thread-local mode: other threads' CUDA calls (none today) cannot invalidate the capture.
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  }
  std::shared_ptr<void> end_capture() override {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_CHECK(err);
    return std::shared_ptr<void>(exec, [](void* e) {
      cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e));
    });
  }
  void abort_capture() override {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
      cudaGraph_t graph = nullptr;
      if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    }
    cudaGetLastError();  // an invalidated capture leaves its error in the last-error slot
  }
  void replay(const std::shared_ptr<void>& graph) override {
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), stream_));
  }

 private:
  enum class AttentionPath { kGeneric = 1, kDecode = 2, kPrefill = 3 };

  // head_dim 64/128 use the tuned kernels: split-K decode when every chunk is one token (GQA
  // groups up to 16, power-of-two blocks of 8..256), the FA2 prefill kernel otherwise (it handles
  // q_len 1 too, just less parallel). Other head dims: the generic kernel.
  static AttentionPath attention_path(const StepArgs& b, const PagedAttentionArgs& a) {
    if (!fast_attention_head_dim(a.head_dim)) return AttentionPath::kGeneric;
    const int group = a.num_q_heads / a.num_kv_heads, bsz = a.block_size;
    const bool decode_ok = group <= 16 && bsz >= 8 && bsz <= 256 && (bsz & (bsz - 1)) == 0;
    if (decode_ok && b.max_q_len == 1 && b.host_kv_lens != nullptr && b.num_tokens == b.num_seqs)
      return AttentionPath::kDecode;
    return AttentionPath::kPrefill;
  }

  // The generic kernel sizes its shared memory for the longest sequence; rounded up so that a
  // recorded graph serves the next 256 positions too (never past what the kernel accepts).
  static int generic_kv_len(int max_kv_len, int head_dim) {
    const int rounded = (std::max(max_kv_len, 1) + 255) / 256 * 256;
    return std::max(max_kv_len, std::min(rounded, 200 * 1024 / 4 - head_dim));
  }

  void ensure_decode_workspace(const PagedAttentionArgs& a, const DecodePlan& plan) {
    const size_t ws =
        cuda::attention_decode_workspace_bytes(a.num_seqs, a.num_q_heads, a.head_dim, plan);
    if (ws <= decode_ws_bytes_) return;
    decode_ws_ = nullptr;
    decode_ws_ = allocate_bytes(ws + ws / 2);
    decode_ws_bytes_ = ws + ws / 2;
    // The split-K kernel's arrival counters start at zero (and every launch leaves them so).
    CUDA_CHECK(cudaMemsetAsync(decode_ws_.get(), 0, decode_ws_bytes_, stream_));
    ++epoch_;  // recorded graphs point at the old workspace
  }

  void ensure_cascade_workspace(const CascadeAttentionArgs& c, const DecodePlan& plan) {
    const size_t ws = cuda::attention_cascade_workspace_bytes(c, DType::kBF16, plan);
    if (ws <= cascade_ws_bytes_) return;
    cascade_ws_ = nullptr;
    cascade_ws_ = allocate_bytes(ws + ws / 2);
    cascade_ws_bytes_ = ws + ws / 2;
    ++epoch_;  // recorded graphs point at the old workspace
  }

  static void expect_bf16(const Tensor& t, const char* what) {
    FS_CHECK(t.dtype == DType::kBF16 && t.device == Device::kCuda, what, " must be a bf16 CUDA ",
             "tensor, got ", dtype_name(t.dtype));
  }

  // Every layer of a step has the same kv_lens and shapes: plan once per step.
  const DecodePlan& decode_plan(const int32_t* kv_lens, const PagedAttentionArgs& a) {
    const std::vector<int> key_shape = {a.num_seqs, a.num_q_heads, a.num_kv_heads, a.head_dim,
                                        a.block_size};
    if (!plan_valid_ || key_shape != plan_shape_ ||
        !std::equal(kv_lens, kv_lens + a.num_seqs, plan_kv_lens_.begin(), plan_kv_lens_.end())) {
      plan_ = cuda::plan_attention_decode(kv_lens, a.num_seqs, a.num_q_heads, a.num_kv_heads,
                                          a.head_dim, a.block_size, DType::kBF16, device_);
      plan_shape_ = key_shape;
      plan_kv_lens_.assign(kv_lens, kv_lens + a.num_seqs);
      plan_valid_ = true;
    }
    return plan_;
  }

  // The cached cuBLASLt plan of one product: bf16 x bf16, or (fp8) E4M3 x E4M3 unscaled. Null
  // for an FP8 shape cuBLASLt has no algorithm for (remembered, so that the caller's fallback is
  // decided once); a bf16 shape without one is an error.
  const GemmPlan* gemm_plan(int m, int n, int k, DType out_dtype, bool fp8) {
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

  static void destroy(GemmPlan& p) {
    if (!p.desc) return;
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.desc);
    p = GemmPlan{};
  }

  // An FP8 weight on the device: the codes, then (16-byte aligned) one fp32 scale per row, in
  // one allocation. The bf16 scratch that larger steps dequantize into grows here, at load, to
  // the largest FP8 weight, so that no step (nor a recorded graph) ever reallocates it.
  Buffer load_fp8_weight(const TensorView& w) {
    FS_CHECK(w.shape.size() == 2 && w.row_scale, "an FP8 weight needs 2 dims and row scales");
    FS_CHECK(w.shape[1] % 8 == 0, "FP8 weights on the GPU need rows of a multiple of 8 values; "
             "this one has ", w.shape[1], " (under tensor parallelism a row is this rank's shard "
             "of the weight, so the shard's width must be a multiple of 8 too: use a "
             "tensor-parallel size that keeps it so, or load the model without --quantize fp8)");
    const int64_t rows = w.shape[0], n = w.numel();
    const size_t codes = (size_t(n) + 15) / 16 * 16;
    Buffer b;
    b.tensor = Tensor(nullptr, DType::kF8E4M3, Device::kCuda, {rows, w.shape[1]});
    b.storage = allocate_bytes(codes + size_t(rows) * 4);
    b.tensor.data = b.storage.get();
    b.tensor.row_scale = reinterpret_cast<const float*>(static_cast<char*>(b.storage.get()) + codes);
    CUDA_CHECK(cudaMemcpy(b.tensor.data, w.data, size_t(n), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(const_cast<float*>(b.tensor.row_scale), w.row_scale, size_t(rows) * 4,
                          cudaMemcpyHostToDevice));
    if (size_t(n) * 2 > fp8_scratch_bytes_) {
      fp8_scratch_ = nullptr;
      fp8_scratch_ = allocate_bytes(size_t(n) * 2);
      fp8_scratch_bytes_ = size_t(n) * 2;
    }
    return b;
  }

  int device_;
  int gemv_max_rows_;  // matmuls of up to this many rows use cuda::gemv_bf16
  // add_rms_norm_matmul fused where it pays; FLASHSERVE_FUSE=0 runs it unfused (an A/B switch
  // for benchmarks, like FLASHSERVE_PDL).
  const bool fuse_ = [] {
    const char* v = std::getenv("FLASHSERVE_FUSE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  std::shared_ptr<void> gemm_ws_;
  std::map<std::tuple<int, int, int, int>, GemmPlan> gemms_;
  DecodePlan plan_;
  bool plan_valid_ = false;
  std::vector<int> plan_shape_;
  std::vector<int32_t> plan_kv_lens_;
  std::shared_ptr<void> decode_ws_;
  size_t decode_ws_bytes_ = 0;
  std::shared_ptr<void> fresh_k_;  // [num_tokens, num_kv_heads, head_dim] turned K (the contiguous prefill path)
  size_t fresh_k_bytes_ = 0;
  cuda::FreshKv fresh_;  // set by qkv_rope_write_kv, taken by the next paged_attention
  int64_t fresh_tokens_ = 0;
  std::shared_ptr<void> cascade_ws_;  // kernels/attention_cascade.h's workspace
  size_t cascade_ws_bytes_ = 0;
  // FP8 steps above the skinny kernels as W8A8 GEMMs (matmul_fp8_gemm): on GPUs with FP8 tensor
  // cores (compute capability 8.9 and up) unless FLASHSERVE_FP8_GEMM=0, which dequantizes
  // instead (the A/B switch; weight-only numerics at every step).
  bool fp8_gemm_ = false;
  // [largest FP8 weight] bf16, see load_fp8_weight; matmul_fp8_gemm puts x's codes and scales here
  std::shared_ptr<void> fp8_scratch_;
  size_t fp8_scratch_bytes_ = 0;
  std::shared_ptr<void> sample_ws_;  // sample_rows: packed requests, work rows, flags, ids
  size_t sample_ws_bytes_ = 0;
  SamplePacker packer_;
  std::vector<char> sample_in_;  // the packed requests on the host
  uint64_t epoch_ = 0;  // graph_epoch()
};

}  // namespace

bool cuda_backend_available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device, int gemv_max_rows) {
  return std::make_unique<CudaBackend>(device, gemv_max_rows);
}

}  // namespace flashserve

#else  // !FLASHSERVE_HAS_CUDA

namespace flashserve {

bool cuda_backend_available() { return false; }

std::unique_ptr<Backend> make_cuda_backend(int, int) {
  FS_THROW("backend 'cuda' requested but flashserve was built without CUDA backend");
}

}  // namespace flashserve

#endif
