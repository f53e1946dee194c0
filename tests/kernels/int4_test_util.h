// Helpers of the int4 kernel tests (test_int4_gemv, test_int4_gemm): a random int4 weight in the
// internal layout of weights/int4_weights.h, the bound sum |x| |w| of their tolerances, the
// weight's CUDA layout (kernels/int4_gemv.h) on the device, and one matmul's inputs with the
// twin's answer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/int4_matmul_ref.h"
#include "kernels/int4_gemv.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {

// The internal layout of weights/int4_weights.h.
struct Int4 {
  int n = 0, k = 0, group_size = 0;
  std::vector<uint8_t> packed;  // [n, k / 2]
  std::vector<float> scales;    // [n, groups]
  std::vector<uint8_t> zeros;   // [n, groups]
  std::vector<int32_t> perm;    // [k] or empty
  int groups() const { return k / group_size; }
  int code(int r, int c) const {
    const uint8_t b = packed[size_t(r) * (k / 2) + c / 2];
    return c % 2 ? b >> 4 : b & 0xF;
  }
};

// Scales log-uniform in [1e-4, 1e2]; zero points 8 (sym) or 0..16 with 16 every 7th group
// (asym); row 0's codes all at their group's zero point, so its outputs are exactly 0.
inline Int4 random_int4(int n, int k, int group_size, bool asym, bool act_order,
                        std::mt19937& rng) {
  Int4 w{n, k, group_size, std::vector<uint8_t>(size_t(n) * k / 2),
         std::vector<float>(size_t(n) * (k / group_size)),
         std::vector<uint8_t>(size_t(n) * (k / group_size)), {}};
  std::uniform_int_distribution<int> nibble(0, 15), zero(0, 16);
  std::uniform_real_distribution<float> log10_scale(-4.f, 2.f);
  for (size_t i = 0; i < w.scales.size(); ++i) {
    w.scales[i] = std::pow(10.f, log10_scale(rng));
    w.zeros[i] = uint8_t(asym ? (i % 7 == 3 ? 16 : zero(rng)) : 8);
    if (i < size_t(w.groups()) && w.zeros[i] == 16) w.zeros[i] = 15;  // row 0's codes equal them
  }
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < k; c += 2) {
      auto pick = [&](int col) {
        return r == 0 ? int(w.zeros[size_t(col / group_size)]) : nibble(rng);
      };
      w.packed[size_t(r) * (k / 2) + c / 2] = uint8_t(pick(c) | pick(c + 1) << 4);
    }
  if (act_order) {
    w.perm.resize(size_t(k));
    std::iota(w.perm.begin(), w.perm.end(), 0);
    std::shuffle(w.perm.begin(), w.perm.end(), rng);
  }
  return w;
}

// B of the tolerances: sum over k of |x| |w| per output [m, n], in input-column order.
inline std::vector<double> bounds(const Int4& w, const std::vector<float>& x, int m) {
  std::vector<double> b(size_t(m) * w.n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int r = 0; r < w.n; ++r) {
      double s = 0;
      for (int c = 0; c < w.k; ++c) {
        const int g = r * w.groups() + c / w.group_size;
        const int col = w.perm.empty() ? c : w.perm[size_t(c)];
        s += std::fabs(double(x[size_t(i) * w.k + col]) * (w.code(r, c) - w.zeros[size_t(g)]) *
                       w.scales[size_t(g)]);
      }
      b[size_t(i) * w.n + r] = s;
    }
  return b;
}

// The weight in the CUDA layout, made by its CPU twin int4_gpu_layout, on the device.
struct DevInt4 {
  explicit DevInt4(const Int4& w)
      : layout(cuda::int4_gpu_layout(w.packed.data(), w.scales.data(), w.zeros.data(), w.n, w.k,
                                     w.group_size)),
        codes(layout.codes), scales(layout.scales), zeros(layout.zeros),
        perm(w.perm.empty() ? std::vector<int32_t>{0} : w.perm) {}
  cuda::Int4GpuLayout layout;
  Dev<uint8_t> codes;
  Dev<float> scales;
  Dev<uint8_t> zeros;
  Dev<int32_t> perm;
};

// One matmul of m rows: x [m, k] random bf16 not centred on zero, the twin's out [m, n] (want),
// B per output (bound), and x on the device in the weight's packed column order (packed:
// gathered by int4_gather_columns under act-order, as the CUDA backend runs it).
struct Int4Case {
  Int4Case(const Int4& w, const DevInt4& d, int m, std::mt19937& rng)
      : x(random_bf16(size_t(m) * w.k, rng, -0.75f, 1.25f)), want(size_t(m) * w.n),
        bound(bounds(w, x, m)), dx(to_bf16(x)), xp(x.size()), packed(dx.ptr) {
    ref::matmul_int4(want.data(), x.data(), w.packed.data(), w.scales.data(), w.zeros.data(),
                     w.perm.empty() ? nullptr : w.perm.data(), m, w.n, w.k, w.group_size);
    if (!w.perm.empty()) {
      cuda::int4_gather_columns(xp.ptr, dx.ptr, d.perm.ptr, m, w.k, nullptr);
      packed = xp.ptr;
    }
  }
  std::vector<float> x, want;  // [m, k], [m, n]
  std::vector<double> bound;   // [m, n]
  Dev<uint16_t> dx, xp;        // [m, k] bf16: x, x gathered
  const void* packed;          // dx or xp
};

}  // namespace flashserve::test
