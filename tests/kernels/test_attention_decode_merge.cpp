// The split-K decode merge kernel alone (kernels/attention_decode.h: attention_decode_merge)
// against a double merge of the same fp32 states: empty (-inf) states whose o holds NaN, huge
// offsets, every thread layout of the merge, head_dim 64/128/256; and its determinism. Thresholds:
// decode_tolerance.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/attention_decode.h"
#include "kernels/cuda/cuda_check.h"
#include "tests/kernels/decode_tolerance.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve {
namespace {

double from_bits(DType t, uint16_t b) { return t == DType::kBF16 ? bf16_bits_to_float(b) : f16_bits_to_float(b); }

// Split counts hit every thread layout of the merge (1, 2, 4, 8 ... groups of threads per column,
// several rows per block or one), rounds of 8 loads that are full, partial or past the row's end,
// and rows that do not fill their block (1 and 37 rows). Row kinds: all finite; some -inf; all
// -inf; huge offsets; only the last split non-empty; only one split in the middle non-empty.
// Empty states hold NaN in o, which must never be read.
TEST(AttentionDecodeMerge, MatchesDoubleMergeWithEmptyStates) {
  std::mt19937 rng(99);
  std::normal_distribution<float> nd(0.5f, 1.f);
  std::uniform_real_distribution<float> ud(-60.f, 60.f);
  for (DType dt : {DType::kBF16, DType::kF16})
    for (int d : {64, 128, 256})
      for (int splits : {1, 2, 3, 5, 8, 9, 16, 17, 33, 64, 65, 128, 129, 200, 256})
        for (int rows : {1, 37}) {
        std::vector<float> o(size_t(rows) * splits * d), lse(size_t(rows) * splits);
        for (int r = 0; r < rows; ++r)
          for (int s = 0; s < splits; ++s) {
            const size_t i = size_t(r) * splits + s;
            const int kind = (r + splits) % 6;
            bool empty = kind == 2 || (kind == 1 && s % 3 == 1) || (kind == 3 && s == 0 && splits > 1);
            if (kind == 4) empty = s != splits - 1;
            if (kind == 5) empty = s != (r * 7) % splits;
            lse[i] = empty ? -INFINITY : (kind == 3 ? 900.f + ud(rng) : ud(rng));
            for (int e = 0; e < d; ++e)
              o[i * d + e] = empty ? std::numeric_limits<float>::quiet_NaN() : nd(rng);  // never read
          }
        test::Dev<float> d_o(o), d_lse(lse), d_lse_out(rows);
        test::Dev<uint16_t> d_out(size_t(rows) * d);
        d_out.poison();
        d_lse_out.poison();
        cuda::attention_decode_merge(d_o.ptr, d_lse.ptr, rows, splits, d, d_out.ptr, d_lse_out.ptr, dt, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> out = d_out.get();
        const std::vector<float> lse_out = d_lse_out.get();
        const std::string what = str_cat(dtype_name(dt), " d", d, " splits ", splits, " rows ", rows);
        for (int r = 0; r < rows; ++r) {
          double mx = -INFINITY;
          for (int s = 0; s < splits; ++s) mx = std::max(mx, double(lse[size_t(r) * splits + s]));
          double total = -INFINITY;
          if (mx != -INFINITY) {
            double sum = 0;
            for (int s = 0; s < splits; ++s) sum += std::exp2(double(lse[size_t(r) * splits + s]) - mx);
            total = mx + std::log2(sum);
          }
          if (std::isinf(total)) {
            EXPECT_TRUE(std::isinf(lse_out[r]) && lse_out[r] < 0) << what << " row " << r;
          } else {
            EXPECT_NEAR(lse_out[r], total, test::kMergeLseAbs * std::max(1.0, std::abs(total) / 100)) << what;
          }
          for (int e = 0; e < d; ++e) {
            double want = 0, max_abs = 1e-30;
            for (int s = 0; s < splits; ++s) {
              const size_t i = size_t(r) * splits + s;
              if (lse[i] == -INFINITY) continue;
              want += std::exp2(double(lse[i]) - total) * o[i * d + e];
              max_abs = std::max(max_abs, std::abs(double(o[i * d + e])));
            }
            const double got = from_bits(dt, out[size_t(r) * d + e]);
            ASSERT_TRUE(std::isfinite(got)) << what << " row " << r;
            if (std::isinf(total)) {
              EXPECT_EQ(got, 0.0) << what << " row " << r << ": an all-empty row must be exactly 0";
            } else {
              EXPECT_NEAR(got, want, std::max(test::merge_max_abs_frac(dt) * max_abs, test::merge_abs_floor(dt))) << what << " row " << r << " col " << e;
            }
          }
        }
        if (HasFailure()) return;  // one report per broken configuration is enough
        }
}

// The merge is deterministic: a fixed summation order over splits and thread groups.
TEST(AttentionDecodeMerge, RepeatedRunsAreBitwiseIdentical) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.5f, 1.f);
  for (int splits : {7, 100})
    for (int d : {128, 256}) {
    const int rows = 9;
    std::vector<float> o(size_t(rows) * splits * d), lse(size_t(rows) * splits);
    for (float& x : o) x = nd(rng);
    for (float& x : lse) x = 10.f * nd(rng);
    test::Dev<float> d_o(o), d_lse(lse), d_lse_out(rows);
    test::Dev<uint16_t> a(size_t(rows) * d), b(size_t(rows) * d);
    cuda::attention_decode_merge(d_o.ptr, d_lse.ptr, rows, splits, d, a.ptr, d_lse_out.ptr, DType::kBF16, nullptr);
    cuda::attention_decode_merge(d_o.ptr, d_lse.ptr, rows, splits, d, b.ptr, nullptr, DType::kBF16, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(a.get(), b.get()) << "splits " << splits << " d" << d;
    }
}

}  // namespace
}  // namespace flashserve
