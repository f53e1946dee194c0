// Helpers of the CUDA kernel tests (tests/kernels, label gpu): a device buffer, a copy back of a
// backend's, random inputs that are exactly bf16, random attention sinks, bf16 <-> float
// conversion of whole vectors, and the closeness check of a bf16 output against its CPU twin's.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"

namespace flashserve::test {

// A device array of `count` T, optionally filled from the host; get() copies it back.
template <class T>
struct Dev {
  T* ptr = nullptr;
  size_t count;
  explicit Dev(size_t n) : count(n) { CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(n, 1) * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    CUDA_CHECK(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(ptr); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> get() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(count);
    CUDA_CHECK(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { CUDA_CHECK(cudaMemset(ptr, 0xff, count * sizeof(T))); }  // NaN in f32 and bf16
};

// `count` T copied back from device memory the test does not own (a backend's buffer).
template <class T>
std::vector<T> download(const void* device, size_t count) {
  std::vector<T> out(count);
  CUDA_CHECK(cudaMemcpy(out.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

// n values uniform in [lo, hi), each exactly representable in bf16 (not centred on zero unless
// the caller asks), so the kernel and its twin see the same inputs.
inline std::vector<float> random_bf16(size_t n, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(DType::kBF16, u(rng));
  return v;
}

// Per-head attention sink logits, N(2, 3): some heads' sinks take most of a row's weight, some
// little (kernels/paged_attention.h).
inline std::vector<float> random_sinks(int num_q_heads, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(2.f, 3.f);
  std::vector<float> s(static_cast<size_t>(num_q_heads));
  for (float& x : s) x = nd(rng);
  return s;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_bits(v[i]);
  return b;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& b) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_bits_to_float(b[i]);
  return v;
}

// 4 bf16 ulps of the largest output: the kernels round their output to bf16 once (2^-8
// relative) and differ from the twins only by fp32 reordering and fast exp/rsqrt/sincos.
constexpr double kBf16Tol = 1.0 / 64;

// max |got - want| <= tol * max(|want|, 1e-3) over the whole array, and no NaN in got.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double err = 0, ref = 1e-3;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_FALSE(std::isnan(got[i])) << what << " [" << i << "]";
    err = std::max(err, std::abs(double(got[i]) - double(want[i])));
    ref = std::max(ref, std::abs(double(want[i])));
  }
  std::printf("%-32s max abs err %.3e (max |ref| %.3e)\n", what, err, ref);
  EXPECT_LE(err, tol * ref) << what;
}

}  // namespace flashserve::test
