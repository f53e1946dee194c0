// The split-K decode merge kernel alone (kernels/attention_decode.h: attention_decode_merge)
// against a double merge of the same fp32 states: empty (-inf) states whose o holds NaN, huge
// offsets, every thread layout of the merge, head_dim 64/128/256, sinks (added once per row); and
// its determinism. Thresholds: decode_tolerance.h.
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

// Row r of a merge's output against the double merge of its splits' states (o [rows, splits, d],
// lse [rows, splits]) and its sink's (base-2 lse sink2, o = 0; -inf = no sink): the lse, and
// every column. A row with nothing to merge must come out -inf and exactly 0.
void expect_row(const std::vector<float>& o, const std::vector<float>& lse, int r, int splits, int d, double sink2,
                const std::vector<uint16_t>& out, const std::vector<float>& lse_out, DType dt, const std::string& what) {
  double mx = sink2;
  for (int s = 0; s < splits; ++s) mx = std::max(mx, double(lse[size_t(r) * splits + s]));
  double total = -INFINITY;
  if (mx != -INFINITY) {
    double sum = std::exp2(sink2 - mx);
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
      EXPECT_NEAR(got, want, std::max(test::merge_max_abs_frac(dt) * max_abs, test::merge_abs_floor(dt)))
          << what << " row " << r << " col " << e;
    }
  }
}

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
        for (int r = 0; r < rows; ++r) expect_row(o, lse, r, splits, d, -INFINITY, out, lse_out, dt, what);
        if (HasFailure()) return;  // one report per broken configuration is enough
        }
}

// Sinks: row r = seq * num_q_heads + head merges its splits and, once, its head's sink (a state
// with o = 0): lse includes the sink, o shrinks by the keys' share. Rows whose splits are all empty
// get out = 0 and lse = the sink's. A sink of -1e30 is no sink, bit for bit.
TEST(AttentionDecodeMerge, SinksJoinOncePerRow) {
  std::mt19937 rng(77);
  std::normal_distribution<float> nd(0.5f, 1.f), sink_nd(2.f, 6.f);
  std::uniform_real_distribution<float> ud(-10.f, 10.f);
  const int hq = 4, seqs = 9, rows = hq * seqs;
  for (DType dt : {DType::kBF16, DType::kF16})
    for (int d : {64, 128, 256})
      for (int splits : {1, 3, 64}) {
        std::vector<float> o(size_t(rows) * splits * d), lse(size_t(rows) * splits), sinks(hq);
        for (float& x : sinks) x = sink_nd(rng);
        for (int r = 0; r < rows; ++r)
          for (int s = 0; s < splits; ++s) {
            const size_t i = size_t(r) * splits + s;
            const bool empty = r / hq == 2 || (s % 2 == 1);  // sequence 2: no keys at all
            lse[i] = empty ? -INFINITY : ud(rng);
            for (int e = 0; e < d; ++e) o[i * d + e] = empty ? std::numeric_limits<float>::quiet_NaN() : nd(rng);
          }
        test::Dev<float> d_o(o), d_lse(lse), d_lse_out(rows), d_sinks(sinks);
        test::Dev<uint16_t> d_out(size_t(rows) * d);
        d_out.poison();
        d_lse_out.poison();
        cuda::attention_decode_merge(d_o.ptr, d_lse.ptr, rows, splits, d, d_out.ptr, d_lse_out.ptr, dt, nullptr,
                                     d_sinks.ptr, hq);
        const std::vector<uint16_t> out = d_out.get();
        const std::vector<float> lse_out = d_lse_out.get();
        const std::string what = str_cat(dtype_name(dt), " d", d, " splits ", splits);
        for (int r = 0; r < rows; ++r)
          expect_row(o, lse, r, splits, d, sinks[r % hq] * 1.4426950408889634, out, lse_out, dt, what);
        // -1e30: the same bits as no sink.
        std::vector<float> tiny(hq, -1e30f);
        test::Dev<float> d_tiny(tiny), d_lse_a(rows), d_lse_b(rows);
        test::Dev<uint16_t> a(size_t(rows) * d), b(size_t(rows) * d);
        cuda::attention_decode_merge(d_o.ptr, d_lse.ptr, rows, splits, d, a.ptr, d_lse_a.ptr, dt, nullptr);
        cuda::attention_decode_merge(d_o.ptr, d_lse.ptr, rows, splits, d, b.ptr, d_lse_b.ptr, dt, nullptr,
                                     d_tiny.ptr, hq);
        EXPECT_EQ(a.get(), b.get()) << what;
        const std::vector<float> la = d_lse_a.get(), lb = d_lse_b.get();
        for (int r = 0; r < rows; ++r)
          if (r / hq != 2) EXPECT_EQ(la[r], lb[r]) << what << " row " << r;  // empty rows: -inf vs the sink
        if (HasFailure()) return;
      }
  // Rows that are not whole sequences of q heads are refused.
  test::Dev<float> d_o(size_t(5) * 64), d_lse(5), d_sinks(4);
  test::Dev<uint16_t> d_out(size_t(5) * 64);
  EXPECT_THROW(cuda::attention_decode_merge(d_o.ptr, d_lse.ptr, 5, 1, 64, d_out.ptr, nullptr, DType::kBF16, nullptr,
                                            d_sinks.ptr, 4),
               Error);
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
