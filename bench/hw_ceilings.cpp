// Measures copy bandwidth and the cuBLASLt bf16 matmul rate on the current device (host code
// over the CUDA runtime and cuBLASLt; built without CUDA it reports "unavailable").
#include "bench/hw_ceilings.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.h"

#if FS_BENCH_HAS_CUDA
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "bench/bench_util.cuh"
#include "kernels/cuda/cuda_check.h"
#endif

namespace flashserve::bench {

#if FS_BENCH_HAS_CUDA
namespace {

#define LT_CHECK(expr)                                                               \
  do {                                                                               \
    cublasStatus_t st_ = (expr);                                                     \
    FS_CHECK(st_ == CUBLAS_STATUS_SUCCESS, #expr, " failed with status ", int(st_)); \
  } while (0)

double measure_copy(cudaStream_t stream) {
  const size_t bytes = size_t(2) << 30;  // far beyond L2, so every byte comes from HBM
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  CUDA_CHECK(cudaMemset(a, 1, bytes));
  const Stats st = compute_stats(
      time_runs([&] { CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); },
                stream, 3, 20, false));
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  return 2.0 * double(bytes) / (st.p50 * 1e-6);  // read + write
}

// Random bf16 in [-1, 1): constant inputs would flatter the rate (less switching, less power).
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const float f = float(seed >> 40) * (2.f / 16777216.f) - 1.f;
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    v[i] = uint16_t(bits >> 16);
  }
  return v;
}

// C[M, N] = A[M, K] * B[K, N]^T-style "TN" GEMM as the linear layers run it (weights row-major
// [out, in]); returns FLOP/s of the p50 run.
double measure_gemm(cublasLtHandle_t lt, cudaStream_t stream, int m, int n, int k) {
  const size_t a_n = size_t(m) * k, b_n = size_t(k) * n, c_n = size_t(m) * n;
  void *a = nullptr, *b = nullptr, *c = nullptr, *ws = nullptr;
  const size_t ws_bytes = size_t(32) << 20;
  CUDA_CHECK(cudaMalloc(&a, a_n * 2));
  CUDA_CHECK(cudaMalloc(&b, b_n * 2));
  CUDA_CHECK(cudaMalloc(&c, c_n * 2));
  CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
  const std::vector<uint16_t> ha = random_bf16(a_n, 1), hb = random_bf16(b_n, 2);
  CUDA_CHECK(cudaMemcpy(a, ha.data(), a_n * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(b, hb.data(), b_n * 2, cudaMemcpyHostToDevice));

  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major views: A is stored [K, M] and transposed, B [K, N], C [M, N].
  LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, m, n, m));
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found));
  FS_CHECK(found > 0, "cuBLASLt found no bf16 algorithm for ", m, "x", n, "x", k);
  const float alpha = 1.f, beta = 0.f;
  const Stats st = compute_stats(time_runs(
      [&] {
        LT_CHECK(cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &heur.algo, ws,
                                ws_bytes, stream));
      },
      stream, 5, 20, false));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  CUDA_CHECK(cudaFree(c));
  CUDA_CHECK(cudaFree(ws));
  return 2.0 * m * double(n) * k / (st.p50 * 1e-6);
}

}  // namespace

std::string gpu_name() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error
    return "none";
  }
  return device_name(0);
}

HwCeilings measure_hw_ceilings() {
  HwCeilings h;
  h.gpu = gpu_name();
  if (h.gpu == "none") {
    h.why_unavailable = "no CUDA device";
    return h;
  }
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cublasLtHandle_t lt = nullptr;
  LT_CHECK(cublasLtCreate(&lt));
  h.copy_bytes_per_s = measure_copy(stream);
  const int shapes[][3] = {{8192, 8192, 8192}, {16384, 8192, 4096}};
  for (const auto &s : shapes) {
    const double rate = measure_gemm(lt, stream, s[0], s[1], s[2]);
    if (rate > h.bf16_flops_per_s)
      h.bf16_flops_per_s = rate,
      h.gemm_shape = std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
  }
  LT_CHECK(cublasLtDestroy(lt));
  CUDA_CHECK(cudaStreamDestroy(stream));
  h.available = true;
  std::fprintf(
      stderr, "ceilings on %s: copy %.1f GB/s (read + write), bf16 GEMM %.1f TFLOP/s (%s)\n",
      h.gpu.c_str(), h.copy_bytes_per_s / 1e9, h.bf16_flops_per_s / 1e12, h.gemm_shape.c_str());
  return h;
}

double measure_bf16_gemm(int m, int n, int k) {
  FS_CHECK(gpu_name() != "none", "no CUDA device");
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cublasLtHandle_t lt = nullptr;
  LT_CHECK(cublasLtCreate(&lt));
  const double rate = measure_gemm(lt, stream, m, n, k);
  LT_CHECK(cublasLtDestroy(lt));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return rate;
}

#else  // built without CUDA

std::string gpu_name() { return "none"; }

HwCeilings measure_hw_ceilings() {
  HwCeilings h;
  h.why_unavailable = "built without CUDA";
  return h;
}

double measure_bf16_gemm(int, int, int) { FS_THROW("built without CUDA"); }

#endif

HwCeilings require_hw_ceilings() {
  HwCeilings hw = measure_hw_ceilings();
  FS_CHECK(hw.available, "no GPU: ", hw.why_unavailable);
  return hw;
}

}  // namespace flashserve::bench
