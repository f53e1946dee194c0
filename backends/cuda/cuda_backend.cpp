// The CUDA backend: weights and activations bf16 (FP8 weights stay FP8: a byte per weight and
// a scale per row, docs/FP8.md) on one GPU, logits f32; everything runs on one stream and host
// copies synchronise it. This file: construction, memory, weights, copies and the row and
// elementwise ops (kernels/norms.h, rope_kv_write.h, elementwise.h, embedding_gather.h); the
// other jobs are in the files backends/cuda/cuda_backend.h lists. Compiles to the no-CUDA stubs
// unless FLASHSERVE_HAS_CUDA.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "kernels/attention_prefill.h"
#include "kernels/elementwise.h"
#include "kernels/embedding_gather.h"
#include "kernels/gemv.h"
#include "kernels/int4_gemm.h"
#include "kernels/int4_gemv.h"
#include "kernels/norms.h"
#include "kernels/rope_kv_write.h"
#include "weights/fp8_weights.h"

namespace flashserve {

CudaBackend::CudaBackend(int device, int gemv_max_rows)
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
  fp8_gemm_ = prop.major > 8 || (prop.major == 8 && prop.minor >= 9);
  prefill_reads_fresh_kv_ = cuda::attention_prefill_reads_fresh_kv(128);  // the Hopper kernel runs here
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  for (auto& [key, p] : gemms_) destroy(p);
  cublasLtDestroy(lt_);
  cudaStreamDestroy(stream_);
}

// What runs, as the weights loaded so far and this GPU decide it.
std::string CudaBackend::name() const {
  const std::string rows = std::to_string(gemv_max_rows_);
  std::string s = "cuda (" + gpu_name_ + "; weights ";
  s += fp8_weights_ > 0 ? "FP8 E4M3 with row scales (" + std::to_string(fp8_weights_) +
                              " matrices) and bf16"
                        : "bf16";
  if (int4_weights_ > 0)
    s += ", int4 packed (" + std::to_string(int4_weights_) + " matrices: int4 GEMV up to " +
         std::to_string(cuda::kInt4GemvMaxRows) + " rows, int4 GEMM up to " +
         std::to_string(cuda::kInt4GemmMaxRows) + " rows, dequantize + bf16 cuBLASLt GEMM above)";
  if (block_fp8_weights_ > 0)
    s += ", block-FP8 (" + std::to_string(block_fp8_weights_) + " matrices: skinny kernels up " +
         "to 16 rows, block-scaled FP8 cuBLASLt GEMM or dequantize + bf16 GEMM above)";
  s += "; matmul: ";
  if (gemv_max_rows_ > 0)
    s += "skinny-matmul kernel up to " + rows + " rows (with the add + norm fused in where it " +
         "pays), cuBLASLt above";
  else
    s += "cuBLASLt";
  if (fp8_weights_ > 0) {
    s += "; FP8 matmul: ";
    if (gemv_max_rows_ > 0)
      s += "skinny FP8 kernel up to " + std::to_string(cuda::kGemvMaxRows) + " rows, ";
    s += fp8_gemm_ ? "W8A8 cuBLASLt GEMM (dequantize + bf16 GEMM where it has no algorithm)"
                   : "dequantize + bf16 cuBLASLt GEMM";
  }
  s += prefill_reads_fresh_kv_
           ? "; attention: Hopper prefill for head_dim 64/128 (fresh prompts' K/V read from the "
             "step's own rows), FA2 otherwise"
           : "; attention: FA2 prefill";
  return s + " + split-K decode for head_dim 64/128/256, generic fp32 kernel otherwise)";
}

size_t CudaBackend::memory_available() const {
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return free_b > kReserveBytes ? free_b - kReserveBytes : 0;
}

std::shared_ptr<void> CudaBackend::allocate_bytes(size_t bytes) {
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

Buffer CudaBackend::load_weight(const TensorView& w) {
  if (w.int4) return load_int4_weight({&w, 1});  // packed: no data
  if (w.block_fp8) return load_block_fp8_weight({&w, 1});  // likewise
  FS_CHECK(w.shape.size() >= 1 && w.shape.size() <= 4 && w.data, "bad weight view");
  if (w.dtype == DType::kF8E4M3 || w.to_fp8) return load_fp8_weight({&w, 1});
  const int64_t n = w.numel();
  Buffer b = allocate(DType::kBF16, {n});
  b.tensor.ndim = int(w.shape.size());
  for (int i = 0; i < b.tensor.ndim; ++i) b.tensor.shape[i] = w.shape[i];
  if (w.dtype == DType::kBF16) {
    upload(b.tensor.data, w.data, size_t(n) * 2);
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
  upload(tmp.get(), src, size_t(n) * 4);
  cuda::f32_to_bf16(b.tensor.data, static_cast<const float*>(tmp.get()), n, stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return b;
}

// bf16 parts go straight to their rows of the device buffer (no host concatenation: for a 7B
// model that copy is two thirds of the weights, on one core); other dtypes are converted
// whole, as one weight.
Buffer CudaBackend::load_stacked_weight(std::span<const TensorView> parts) {
  const TensorView stacked = stacked_view(parts);
  if (stacked.dtype == DType::kI4) return load_int4_weight(parts);  // each part laid out in place
  if (parts[0].block_fp8) return load_block_fp8_weight(parts);  // likewise
  if (stacked.dtype == DType::kF8E4M3 || stacked.to_fp8) return load_fp8_weight(parts);  // likewise
  if (stacked.dtype != DType::kBF16) return Backend::load_stacked_weight(parts);
  Buffer b = allocate(DType::kBF16, {stacked.numel()});
  b.tensor.ndim = int(stacked.shape.size());
  for (int i = 0; i < b.tensor.ndim; ++i) b.tensor.shape[i] = stacked.shape[i];
  char* at = static_cast<char*>(b.tensor.data);
  for (const TensorView& t : parts) {
    upload(at, t.data, size_t(t.numel()) * 2);
    at += size_t(t.numel()) * 2;
  }
  return b;
}

// An FP8 weight on the device, from its parts stacked by rows (one part: the weight itself): the
// codes, then (16-byte aligned) one fp32 scale per row, in one allocation. FP8 parts' codes and
// scales go straight to their rows. Parts marked to_fp8 (--quantize fp8) go up as stored into
// the bf16 scratch and the GPU quantizes them there, all rows at once (f32 ones are quantized on
// the host). That scratch, which larger steps dequantize into, grows here, at load, to the
// largest FP8 weight, so that no step (nor a recorded graph) ever reallocates it.
Buffer CudaBackend::load_fp8_weight(std::span<const TensorView> parts) {
  const TensorView w = stacked_view(parts);
  FS_CHECK(w.shape.size() == 2 && (w.to_fp8 || parts[0].row_scale),
           "an FP8 weight needs 2 dims and row scales");
  FS_CHECK(w.shape[1] % 8 == 0, "FP8 weights on the GPU need rows of a multiple of 8 values; "
           "this one has ", w.shape[1], " (under tensor parallelism a row is this rank's shard "
           "of the weight, so the shard's width must be a multiple of 8 too: use a "
           "tensor-parallel size that keeps it so, or load the model without --quantize fp8)");
  const int64_t rows = w.shape[0], n = w.numel();
  const size_t codes = align16(size_t(n));
  Buffer b;
  b.tensor = Tensor(nullptr, DType::kF8E4M3, Device::kCuda, {rows, w.shape[1]});
  b.storage = allocate_bytes(codes + size_t(rows) * 4);
  b.tensor.data = b.storage.get();
  b.tensor.row_scale = reinterpret_cast<const float*>(static_cast<char*>(b.storage.get()) + codes);
  if (size_t(n) * 2 > fp8_scratch_bytes_) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the last weight quantized may still read it
    fp8_scratch_ = nullptr;
    fp8_scratch_ = allocate_bytes(size_t(n) * 2);
    fp8_scratch_bytes_ = size_t(n) * 2;
  }
  char* at = static_cast<char*>(b.tensor.data);
  float* scale = const_cast<float*>(b.tensor.row_scale);
  if (w.to_fp8 && w.dtype != DType::kF32) {
    char* staged = static_cast<char*>(fp8_scratch_.get());
    for (const TensorView& p : parts) {
      upload(staged, p.data, size_t(p.numel()) * 2);
      staged += size_t(p.numel()) * 2;
    }
    if (!fp8_quantizer_) fp8_quantizer_ = std::make_unique<GpuFp8Quantizer>();
    fp8_quantizer_->quantize(at, scale, fp8_scratch_.get(), w.dtype, rows, w.shape[1], stream_);
  } else {
    for (const TensorView& part : parts) {
      Fp8Rows quantized;  // an f32 part marked to_fp8
      const TensorView p = fp8_view_on_host(part, &quantized);
      upload(at, p.data, size_t(p.numel()));
      upload(scale, p.row_scale, size_t(p.shape[0]) * 4);
      at += p.numel();
      scale += p.shape[0];
    }
  }
  ++fp8_weights_;
  return b;
}

// Weights go up through pinned staging (backends/cuda/host_upload.h), made at the first weight.
void CudaBackend::upload(void* dst, const void* src, size_t bytes) {
  if (!uploader_) uploader_ = std::make_unique<HostUpload>();
  uploader_->copy(dst, src, bytes, stream_);
}

void CudaBackend::copy_from_host(Tensor dst, const void* src) {
  if (dst.bytes())
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.bytes(), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::copy_to_host(void* dst, const Tensor& src) {
  if (src.bytes())
    CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.bytes(), cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

void CudaBackend::embedding(Tensor out, const Tensor& ids, const Tensor& table) {
  expect_bf16(out, "embedding out");
  expect_bf16(table, "embedding table");
  FS_CHECK(out.numel() == ids.numel() * table.dim(1), "embedding: out has ", out.numel(),
           " elements");
  cuda::embedding_bf16(out.data, ids.as<int32_t>(), table.data, int(ids.numel()),
                       int(table.dim(1)), int(table.dim(0)), stream_);
}

void CudaBackend::rms_norm(Tensor out, const Tensor& x, const Tensor& w, float eps) {
  expect_bf16(out, "rms_norm out");
  expect_bf16(x, "rms_norm x");
  const int64_t hidden = w.numel();
  FS_CHECK(x.numel() == out.numel() && hidden > 0 && x.numel() % hidden == 0,
           "rms_norm: shapes");
  cuda::rms_norm_bf16(out.data, x.data, w.data, int(x.numel() / hidden), int(hidden), eps,
                      stream_);
}

void CudaBackend::rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) {
  expect_bf16(q, "rope q");
  expect_bf16(k, "rope k");
  FS_CHECK(q.ndim == 3 && k.ndim == 3 && q.dim(2) == k.dim(2) &&
               inv_freq.numel() * 2 == q.dim(2),
           "rope: shapes");
  cuda::rope_bf16(q.data, k.data, positions.as<int32_t>(), inv_freq.as<float>(),
                  int(q.dim(0)), int(q.dim(1)), int(k.dim(1)), int(q.dim(2)), stream_);
}

void CudaBackend::swiglu(Tensor out, const Tensor& gate, const Tensor& up) {
  FS_CHECK(out.numel() == gate.numel() && gate.numel() == up.numel(), "swiglu: shapes");
  cuda::swiglu_bf16(out.data, gate.data, up.data, out.numel(), stream_);
}

void CudaBackend::add(Tensor out, const Tensor& a, const Tensor& b) {
  FS_CHECK(out.numel() == a.numel() && a.numel() == b.numel(), "add: shapes");
  cuda::add_bf16(out.data, a.data, b.data, out.numel(), stream_);
}

void CudaBackend::gather_rows(Tensor out, const Tensor& x, const Tensor& row_ids) {
  FS_CHECK(out.dtype == x.dtype && out.ndim >= 1 && x.ndim >= 1 &&
               out.numel() / out.dim(0) == x.numel() / x.dim(0) &&
               row_ids.numel() == out.dim(0),
           "gather_rows: shapes");
  const int64_t row_bytes = out.dim(0) ? int64_t(out.bytes()) / out.dim(0) : 0;
  cuda::gather_rows(out.data, x.data, row_ids.as<int32_t>(), int(out.dim(0)), int(row_bytes),
                    stream_);
}

void CudaBackend::write_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v,
              const Tensor& slots) {
  expect_bf16(k_cache, "k_cache");
  FS_CHECK(k.ndim == 3 && k.numel() == v.numel() && slots.numel() == k.dim(0),
           "write_kv: shapes");
  cuda::write_kv_bf16(k_cache.data, v_cache.data, k.data, v.data, slots.as<int32_t>(),
                      int(k.dim(0)), int(k.dim(1)), int(k.dim(2)), stream_);
}

void CudaBackend::add_bias(Tensor x, const Tensor& bias) {
  if (x.dtype == DType::kF32 && bias.dtype == DType::kF32) {  // f32 logits (gpt-oss's router)
    const int64_t width = bias.numel();
    FS_CHECK(width > 0 && x.numel() % width == 0, "add_bias: x has ", x.numel(),
             " elements, bias ", width);
    return cuda::add_bias_f32(x.as<float>(), bias.as<float>(), int(x.numel() / width),
                              int(width), stream_);
  }
  expect_bf16(x, "add_bias x");
  expect_bf16(bias, "add_bias bias");
  const int64_t width = bias.numel();
  FS_CHECK(width > 0 && x.numel() % width == 0, "add_bias: x has ", x.numel(),
           " elements, bias ", width);
  cuda::add_bias_bf16(x.data, bias.data, int(x.numel() / width), int(width), stream_);
}

void CudaBackend::qk_norm(Tensor qkv, const Tensor& q_weight, const Tensor& k_weight, int num_q_heads,
             int num_kv_heads, float eps) {
  expect_bf16(qkv, "qk_norm qkv");
  expect_bf16(q_weight, "qk_norm q_weight");
  expect_bf16(k_weight, "qk_norm k_weight");
  FS_CHECK(qkv.ndim == 3 && qkv.dim(1) == num_q_heads + 2 * num_kv_heads &&
               q_weight.numel() == qkv.dim(2) && k_weight.numel() == qkv.dim(2),
           "qk_norm: shapes");
  cuda::qk_norm_bf16(qkv.data, q_weight.data, k_weight.data, int(qkv.dim(0)), num_q_heads,
                     num_kv_heads, int(qkv.dim(2)), eps, stream_);
}

void CudaBackend::add_rms_norm(Tensor out, Tensor x, const Tensor& delta, const Tensor& w,
                  float eps) {
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

void CudaBackend::qkv_rope_write_kv(Tensor q, Tensor k_cache, Tensor v_cache, const Tensor& qkv,
                       const Tensor& positions, const Tensor& inv_freq,
                       const Tensor& slot_mapping) {
  expect_bf16(q, "qkv_rope_write_kv q");
  expect_bf16(qkv, "qkv_rope_write_kv qkv");
  expect_bf16(k_cache, "k_cache");
  FS_CHECK(q.ndim == 3 && k_cache.ndim == 4, "qkv_rope_write_kv: shapes");
  const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k_cache.dim(2);
  FS_CHECK(qkv.numel() == n * (hq + 2 * hkv) * d && positions.numel() == n &&
               slot_mapping.numel() == n && inv_freq.numel() * 2 == d && k_cache.dim(3) == d,
           "qkv_rope_write_kv: shapes");
  // The prefill launcher's contiguous path (where the Hopper kernel runs): a multi-token step also keeps
  // its turned K rows, so the paged_attention that follows can give the prefill kernel this
  // step's own K/V (K from here, V straight from qkv) for its fresh prompts. Never while a graph
  // is recorded: the buffer may move.
  fresh_ = {};
  void* k_rows = nullptr;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (n > 1 && prefill_reads_fresh_kv_ && cuda::attention_prefill_reads_fresh_kv(int(d)) &&
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

void CudaBackend::swiglu_fused(Tensor out, const Tensor& gate_up) {
  expect_bf16(out, "swiglu_fused out");
  expect_bf16(gate_up, "swiglu_fused gate_up");
  const int64_t inter = out.dim(out.ndim - 1), n = out.numel() / std::max<int64_t>(inter, 1);
  FS_CHECK(gate_up.numel() == 2 * n * inter, "swiglu_fused: shapes");
  cuda::swiglu_fused_bf16(out.data, gate_up.data, int(n), int(inter), stream_);
}

void CudaBackend::geglu_fused(Tensor out, const Tensor& gate_up) {
  expect_bf16(out, "geglu_fused out");
  expect_bf16(gate_up, "geglu_fused gate_up");
  const int64_t inter = out.dim(out.ndim - 1), n = out.numel() / std::max<int64_t>(inter, 1);
  FS_CHECK(gate_up.numel() == 2 * n * inter, "geglu_fused: shapes");
  cuda::geglu_fused_bf16(out.data, gate_up.data, int(n), int(inter), stream_);
}

void CudaBackend::scale(Tensor x, float factor) {
  expect_bf16(x, "scale x");
  cuda::scale_bf16(x.data, factor, x.numel(), stream_);
}

void CudaBackend::softcap(Tensor x, float cap) {
  FS_CHECK(x.dtype == DType::kF32 && x.device == Device::kCuda && cap > 0.f,
           "softcap: x must be f32 on the GPU and cap positive");
  cuda::softcap_f32(x.as<float>(), cap, x.numel(), stream_);
}

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
