// The CPU twin of the fused decode op (kernels/cpu/fused_decode_ref.h) against the CPU backend,
// whose add_rms_norm_matmul is the default composition of its own ops (backends/backend.h): the
// same function in fp32 up to the order of summation; and the bf16 mode rounding exactly the
// intermediates it says it rounds. Random shapes not centred on zero, odd sizes, m past 16.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "backends/backend.h"
#include "core/dtype.h"
#include "kernels/cpu/fused_decode_ref.h"

namespace flashserve {
namespace {

class FusedDecodeRef : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(2);
  std::mt19937 rng_{77};

  std::vector<float> random(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng_);
    return v;
  }
  Buffer upload(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
    Buffer b = cpu_->allocate(DType::kF32, shape);
    cpu_->copy_from_host(b.tensor, v.data());
    return b;
  }
  static std::vector<float> values(const Buffer& b) {
    const float* p = b.tensor.as<float>();
    return std::vector<float>(p, p + b.tensor.numel());
  }
};

// |a - b| <= rel * max |b| elementwise.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, double rel, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 1e-6, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, std::abs(double(b[i])));
    err = std::max(err, std::abs(double(a[i]) - b[i]));
  }
  EXPECT_LE(err, rel * scale) << what << ": max abs err " << err << " of " << scale;
}

constexpr double kFp32Order = 1e-5;  // fp32 dot products in another order, k up to a few thousand

TEST_F(FusedDecodeRef, TwinEqualsTheCpuBackendsComposition) {
  for (auto [m, n, k] : {std::tuple{1, 64, 64}, {3, 37, 72}, {16, 40, 2048}, {17, 9, 5}, {33, 5, 136}}) {
    const auto x = random(size_t(m) * k, -2.f, 3.f), d = random(size_t(m) * k, -1.f, 2.f);
    const auto nw = random(size_t(k), 0.5f, 1.5f), w = random(size_t(n) * k, -1.f, 1.f);
    Buffer xb = upload(x, {m, k}), db = upload(d, {m, k}), nb = upload(nw, {k}), wb = upload(w, {n, k});
    for (bool with_delta : {false, true}) {
      Buffer out = cpu_->allocate(DType::kF32, {m, n}), h = cpu_->allocate(DType::kF32, {m, k});
      Buffer x_out = upload(std::vector<float>(size_t(m) * k, -7.f), {m, k});
      cpu_->add_rms_norm_matmul(out.tensor, h.tensor, x_out.tensor, xb.tensor,
                                with_delta ? db.tensor : Tensor(), nb.tensor, 1e-6f, wb.tensor);
      std::vector<float> want(size_t(m) * n), want_x(size_t(m) * k, -7.f);
      ref::add_rms_norm_matmul(want.data(), want_x.data(), x.data(), with_delta ? d.data() : nullptr,
                               nw.data(), 1e-6f, w.data(), m, n, k, DType::kF32);
      expect_close(values(out), want, kFp32Order, "add_rms_norm_matmul");
      EXPECT_EQ(values(x_out), want_x) << "the residual sum, or untouched without a delta";
    }
  }
}

// In bf16 mode the residual sum is x + delta rounded to bf16, and the output is what the fp32
// twin gives for the bf16-rounded normed row: checked by recomputing that row here.
TEST_F(FusedDecodeRef, Bf16ModeRoundsTheIntermediates) {
  const int m = 2, n = 3, k = 40;
  const auto x = random(size_t(m) * k, -2.f, 3.f), d = random(size_t(m) * k, -1.f, 2.f);
  const auto nw = random(size_t(k), 0.5f, 1.5f), w = random(size_t(n) * k, -1.f, 1.f);
  std::vector<float> out(size_t(m) * n), x_out(size_t(m) * k);
  ref::add_rms_norm_matmul(out.data(), x_out.data(), x.data(), d.data(), nw.data(), 1e-5f, w.data(), m, n,
                           k, DType::kBF16);
  bool rounded_something = false;
  for (int r = 0; r < m; ++r) {
    double ss = 0;
    std::vector<float> h(k);
    for (int c = 0; c < k; ++c) {
      const float s = x[size_t(r) * k + c] + d[size_t(r) * k + c];
      ASSERT_EQ(x_out[size_t(r) * k + c], round_to(DType::kBF16, s));
      rounded_something |= x_out[size_t(r) * k + c] != s;
      ss += double(x_out[size_t(r) * k + c]) * x_out[size_t(r) * k + c];
    }
    const float inv = float(1.0 / std::sqrt(ss / k + 1e-5));
    for (int c = 0; c < k; ++c) h[c] = round_to(DType::kBF16, x_out[size_t(r) * k + c] * inv * nw[c]);
    for (int j = 0; j < n; ++j) {
      double acc = 0;
      for (int c = 0; c < k; ++c) acc += double(h[c]) * w[size_t(j) * k + c];
      EXPECT_NEAR(out[size_t(r) * n + j], acc, 1e-5 * std::max(1.0, std::abs(acc)));
    }
  }
  EXPECT_TRUE(rounded_something) << "random fp32 sums should not all be bf16 values";
}

}  // namespace
}  // namespace flashserve
