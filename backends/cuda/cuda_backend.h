// CudaBackend, the CUDA Backend (make_cuda_backend in backends/backend.h), internal to
// backends/cuda/. Its definitions are split by job: cuda_backend.cpp (device, memory, weights,
// the row and elementwise ops), cuda_matmul.cpp (cuBLASLt plans, the skinny and FP8 matmuls),
// cuda_attention.cpp (which attention kernel runs, its workspaces), cuda_graphs.cpp (graph
// keys, capture and replay), cuda_sampler.cpp (argmax and the GPU sampler). CUDA builds only.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/host_upload.h"
#include "backends/cuda/gpu_fp8_quantizer.h"
#include "kernels/attention_decode.h"
#include "kernels/attention_prefill.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/moe.h"
#include "sampling/sample_pack.h"

#define CUBLAS_CHECK(expr)                                                               \
  do {                                                                                   \
    cublasStatus_t fs_st_ = (expr);                                                      \
    if (fs_st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::flashserve::throw_error(__FILE__, __LINE__, #expr, " failed: cublas status ",    \
                                int(fs_st_));                                            \
  } while (0)

namespace flashserve {

// Bytes rounded up to 16: where the parts of one weight allocation (codes, scales, ...) start.
constexpr size_t align16(size_t bytes) { return (bytes + 15) / 16 * 16; }

constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;
// Left free after the weights for activations, cuBLASLt, attention workspaces and the CUDA
// context's own growth; the KV cache may take a fraction of the rest.
constexpr size_t kReserveBytes = size_t(1) << 30;

// One cuBLASLt matmul configuration: row-major out[m, n] = x[m, k] · w[n, k]ᵀ, computed in the
// column-major view as outᵀ (n×m) = w (k×n)ᵀ · xᵀ (k×m).
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class CudaBackend final : public Backend {
 public:
  // ---- construction, memory, weights, copies (cuda_backend.cpp)
  CudaBackend(int device, int gemv_max_rows);
  ~CudaBackend() override;
  std::string name() const override;
  Device device() const override { return Device::kCuda; }
  DType compute_dtype() const override { return DType::kBF16; }
  size_t memory_available() const override;
  std::shared_ptr<void> allocate_bytes(size_t bytes) override;
  Buffer load_weight(const TensorView& w) override;
  Buffer load_stacked_weight(std::span<const TensorView> parts) override;
  std::string take_conversion_report() override;  // cuda_int4.cpp
  void copy_from_host(Tensor dst, const void* src) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  void* native_stream() override { return stream_; }

  // ---- row and elementwise ops (cuda_backend.cpp)
  void embedding(Tensor out, const Tensor& ids, const Tensor& table) override;
  void rms_norm(Tensor out, const Tensor& x, const Tensor& w, float eps) override;
  void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) override;
  void swiglu(Tensor out, const Tensor& gate, const Tensor& up) override;
  void add(Tensor out, const Tensor& a, const Tensor& b) override;
  void gather_rows(Tensor out, const Tensor& x, const Tensor& row_ids) override;
  void write_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v,
                const Tensor& slots) override;
  void add_bias(Tensor x, const Tensor& bias) override;
  void qk_norm(Tensor qkv, const Tensor& q_weight, const Tensor& k_weight, int num_q_heads,
               int num_kv_heads, float eps) override;
  void add_rms_norm(Tensor out, Tensor x, const Tensor& delta, const Tensor& w,
                    float eps) override;
  void qkv_rope_write_kv(Tensor q, Tensor k_cache, Tensor v_cache, const Tensor& qkv,
                         const Tensor& positions, const Tensor& inv_freq,
                         const Tensor& slot_mapping) override;
  void swiglu_fused(Tensor out, const Tensor& gate_up) override;
  void geglu_fused(Tensor out, const Tensor& gate_up) override;
  void scale(Tensor x, float factor) override;
  void softcap(Tensor x, float cap) override;

  // ---- matmuls (cuda_matmul.cpp)
  void matmul(Tensor out, const Tensor& x, const Tensor& w) override;
  void add_rms_norm_matmul(Tensor out, Tensor h, Tensor x_out, const Tensor& x, const Tensor& delta,
                           const Tensor& norm_w, float eps, const Tensor& w) override;

  // ---- attention (cuda_attention.cpp)
  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const StepArgs& b, const AttentionScoring& scoring) override;

  // ---- mixture of experts (cuda_moe.cpp)
  std::shared_ptr<MoeExperts> load_moe_experts(std::span<const TensorView> gate,
                                               std::span<const TensorView> up,
                                               std::span<const TensorView> down) override;
  void moe_route(Tensor expert_ids, Tensor weights, const Tensor& logits, int top_k,
                 bool renormalize) override;
  void moe_experts(Tensor out, const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                   const MoeExperts& experts) override;
  void add_sigmoid_gated(Tensor out, const Tensor& y, const Tensor& gate_logit) override;

  // ---- argmax and the GPU sampler (cuda_sampler.cpp)
  void argmax_rows(Tensor ids, const Tensor& logits) override;
  void sample_rows(int32_t* ids, const Tensor& logits, std::span<const int64_t> rows,
                   std::span<const SampleRequest> requests) override;

  // ---- CUDA graphs (cuda_graphs.cpp)
  bool graph_launch_key(const StepArgs& b, int num_q_heads, int num_kv_heads, int head_dim,
                        std::span<const int> windows, uint64_t* key) override;
  uint64_t graph_epoch() const override { return epoch_; }
  void begin_capture() override;
  std::shared_ptr<void> end_capture() override;
  void abort_capture() override;
  void replay(const std::shared_ptr<void>& graph) override;

 private:
  enum class AttentionPath { kGeneric = 1, kDecode = 2, kPrefill = 3 };

  // cuda_matmul.cpp
  bool matmul_fp8_gemm(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n,
                       int64_t k);
  const GemmPlan* gemm_plan(int m, int n, int k, DType out_dtype, bool fp8);
  static void destroy(GemmPlan& p);
  Buffer load_fp8_weight(std::span<const TensorView> parts);  // cuda_backend.cpp: one or a stack
  // cuda_int4.cpp: int4 weights (docs/QUANTIZATION.md, kernels/int4_gemv.h)
  Buffer load_int4_weight(std::span<const TensorView> parts);  // one projection or a stack
  Buffer lay_out_int4(const std::vector<const Int4Stored*>& parts);  // int4_stackable parts
  Buffer int4_as_bf16(const std::vector<const Int4Stored*>& parts);  // the others
  void matmul_int4(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n, int64_t k);
  // cuda_block_fp8.cpp: block-wise FP8 weights (docs/QUANTIZATION.md, kernels/block_fp8.h)
  Buffer load_block_fp8_weight(std::span<const TensorView> parts);  // one projection or a stack
  void matmul_block_fp8(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n,
                        int64_t k);
  bool matmul_block_fp8_gemm(Tensor& out, const Tensor& x, const Tensor& w, int64_t m, int64_t n,
                             int64_t k);
  const GemmPlan* block_fp8_plan(int m, int n, int k, DType out_dtype, const float* w_scale,
                                 const float* x_scale);
  void upload(void* dst, const void* src, size_t bytes);  // cuda_backend.cpp: a weight's bytes
  // cuda_moe.cpp
  void* moe_workspace(size_t bytes);
  // moe_experts for gpt-oss's MXFP4 experts (MoeExperts::mxfp4; kernels/mxfp4.h).
  void moe_experts_mxfp4(Tensor out, const Tensor& x, const int32_t* ids, const Tensor& weights,
                         const MoeExperts& experts, int top_k);
  void moe_grouped_matmul(void* out, const void* a, const cuda::MoePermutation& p,
                          const cuda::MoeProjection& w, const void* stack,
                          const cuda::MoeExpertPtrs* host, int num_experts, int max_rows,
                          void* expert_bf16);
  // cuda_attention.cpp
  static AttentionPath attention_path(const StepArgs& b, const PagedAttentionArgs& a);
  static int generic_kv_len(int max_kv_len, int head_dim);
  void ensure_decode_workspace(const PagedAttentionArgs& a, const DecodePlan& plan);
  const DecodePlan& decode_plan(const int32_t* kv_lens, const PagedAttentionArgs& a);

  static void expect_bf16(const Tensor& t, const char* what) {
    FS_CHECK(t.dtype == DType::kBF16 && t.device == Device::kCuda, what, " must be a bf16 CUDA ",
             "tensor, got ", dtype_name(t.dtype));
  }

  int device_;
  int gemv_max_rows_;  // matmuls of up to this many rows use cuda::gemv_bf16
  std::string gpu_name_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  std::shared_ptr<void> gemm_ws_;
  std::map<std::tuple<int, int, int, int>, GemmPlan> gemms_;
  std::map<int, DecodePlan> plans_;  // this step's decode plan per sliding window (0 = full)
  std::vector<int> plan_shape_;      // ...for this shape and these kv_lens
  std::vector<int32_t> plan_kv_lens_;
  std::map<std::vector<int>, uint64_t> launch_ids_;  // graph_launch_key: id per set of plans
  std::shared_ptr<void> decode_ws_;
  size_t decode_ws_bytes_ = 0;
  std::shared_ptr<void> fresh_k_;  // [num_tokens, num_kv_heads, head_dim] turned K (the contiguous prefill path)
  size_t fresh_k_bytes_ = 0;
  cuda::FreshKv fresh_;  // set by qkv_rope_write_kv, taken by the next paged_attention
  int64_t fresh_tokens_ = 0;
  bool prefill_reads_fresh_kv_ = false;  // the Hopper prefill kernel runs on this GPU
  // FP8 steps above the skinny kernels as W8A8 GEMMs (matmul_fp8_gemm) on GPUs with FP8 tensor
  // cores (compute capability 8.9 and up); others dequantize instead (weight-only numerics).
  bool fp8_gemm_ = false;
  // [largest FP8 or int4 weight] bf16, see load_fp8_weight and load_int4_weight; matmul_fp8_gemm
  // puts x's codes and scales here; load_int4_weight stages a checkpoint's words here
  std::shared_ptr<void> fp8_scratch_;
  size_t fp8_scratch_bytes_ = 0;
  int64_t fp8_weights_ = 0;  // FP8 weights loaded (name() says what runs)
  int64_t int4_weights_ = 0;  // int4 weights loaded (name() too)
  int64_t int4_converted_ = 0;  // int4 weights loaded since take_conversion_report,
  double int4_converted_bytes_ = 0, int4_convert_s_ = 0;  // their stored bytes and load time
  std::shared_ptr<void> int4_x_;  // [kInt4GemvMaxRows, largest int4 k] bf16: act-order's gathered x
  size_t int4_x_bytes_ = 0;
  int64_t block_fp8_weights_ = 0;  // block-wise FP8 weights loaded (name() too)
  int64_t block_fp8_converted_ = 0;  // block-wise FP8 weights loaded since take_conversion_report,
  double block_fp8_converted_bytes_ = 0, block_fp8_convert_s_ = 0;  // their stored bytes, load time
  bool block_fp8_fallback_said_ = false;  // the dequantize fallback's log line, once
  std::shared_ptr<void> moe_ws_;  // moe_experts: the permutation and the experts' activations
  size_t moe_ws_bytes_ = 0;
  size_t moe_expert_bytes_ = 0;  // + one quantized expert dequantized to bf16 (the general path)
  std::shared_ptr<void> sample_ws_;  // sample_rows: packed requests, work rows, flags, ids
  size_t sample_ws_bytes_ = 0;
  SamplePacker packer_;
  // The packed requests on the host, pinned: the step's grammar masks (16 KB a row at a 128k
  // vocabulary) go up by DMA instead of through the driver's pageable staging.
  std::shared_ptr<char> sample_in_;
  size_t sample_in_bytes_ = 0;
  uint64_t epoch_ = 0;  // graph_epoch()
  // Pinned staging for weight uploads (two 64 MiB host buffers), made at the first weight.
  std::unique_ptr<HostUpload> uploader_;
  std::unique_ptr<GpuFp8Quantizer> fp8_quantizer_;  // --quantize fp8 on the GPU, at its first weight
};

}  // namespace flashserve
