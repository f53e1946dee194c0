// int4_layout_codes (kernels/int4_layout.h), the CUDA layout made on the GPU from a checkpoint's
// words, against its CPU twin int4_gpu_layout over the internal packing: byte for byte, for the
// three word packings (compressed-tensors rows, GPTQ, AWQ), with and without an act-order
// permutation, rows not a multiple of the 16-row tile, k with and without a partial 128-column
// unit. Codes are random nibbles (0 and 15 included) and the output is poisoned first, so a
// wrong nibble, column, row or unwritten padding byte shows.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/int4_gemv.h"
#include "kernels/int4_layout.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve {
namespace {

using test::Dev;

// codes [n, k] in input-column order written as `packing` stores them (weights/int4_packing.h),
// from the format descriptions.
std::vector<uint32_t> stored_words(const std::vector<uint8_t>& codes, Int4Packing packing, int n,
                                   int k) {
  std::vector<uint32_t> words(size_t(n) * k / 8, 0);
  for (int r = 0; r < n; ++r)
    for (int i = 0; i < k; ++i) {
      const uint32_t q = codes[size_t(r) * k + i];
      if (packing == Int4Packing::kRows)
        words[size_t(r) * (k / 8) + i / 8] |= q << (4 * (i % 8));
      else if (packing == Int4Packing::kGptq)
        words[size_t(i / 8) * n + r] |= q << (4 * (i % 8));
      else
        words[size_t(i) * (n / 8) + r / 8] |= q << (4 * kAwqNibble[r % 8]);
    }
  return words;
}

TEST(Int4Layout, MatchesTheCpuTwin) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> nibble(0, 15);
  for (const auto& [n, k] : {std::tuple{8, 128}, {24, 200}, {40, 1000}, {136, 4160}}) {
    std::vector<uint8_t> codes(size_t(n) * k);  // [n, k], input-column order
    for (uint8_t& c : codes) c = uint8_t(nibble(rng));
    codes[0] = 15;
    codes[1] = 0;
    for (bool act_order : {false, true}) {
      std::vector<int32_t> perm(static_cast<size_t>(k));
      std::iota(perm.begin(), perm.end(), 0);
      if (act_order) std::shuffle(perm.begin(), perm.end(), rng);
      // The internal packing: packed column j of row r holds input column perm[j].
      std::vector<uint8_t> packed(size_t(n) * k / 2, 0);
      for (int r = 0; r < n; ++r)
        for (int j = 0; j < k; ++j)
          packed[size_t(r) * (k / 2) + j / 2] |=
              uint8_t(codes[size_t(r) * k + perm[size_t(j)]] << (4 * (j % 2)));
      const int groups = 1;
      const std::vector<float> scales(size_t(n) * groups, 1.f);
      const std::vector<uint8_t> zeros(size_t(n) * groups, 8);
      const std::vector<uint8_t> want =
          cuda::int4_gpu_layout(packed.data(), scales.data(), zeros.data(), n, k, k).codes;
      const Dev<int32_t> dperm(perm);
      for (Int4Packing packing : {Int4Packing::kRows, Int4Packing::kGptq, Int4Packing::kAwq}) {
        const Dev<uint32_t> words(stored_words(codes, packing, n, k));
        Dev<uint8_t> out(size_t(n) * cuda::int4_row_bytes(k));
        out.poison();
        cuda::int4_layout_codes(out.ptr, words.ptr, packing, act_order ? dperm.ptr : nullptr, n,
                                k, nullptr);
        const std::vector<uint8_t> got = out.get();
        ASSERT_EQ(got.size(), want.size());
        for (size_t b = 0; b < got.size(); ++b)
          ASSERT_EQ(got[b], want[b]) << "n " << n << " k " << k << " packing " << int(packing)
                                     << " act-order " << act_order << " byte " << b;
      }
    }
  }
}

// Compressed-tensors rows need no multiple of 8; GPTQ and AWQ pack along the rows and do.
TEST(Int4Layout, RowCounts) {
  std::vector<uint8_t> codes(size_t(13) * 64, 5);
  const Dev<uint32_t> words(stored_words(codes, Int4Packing::kRows, 13, 64));
  Dev<uint8_t> out(size_t(13) * cuda::int4_row_bytes(64));
  out.poison();
  cuda::int4_layout_codes(out.ptr, words.ptr, Int4Packing::kRows, nullptr, 13, 64, nullptr);
  for (uint8_t b : out.get()) ASSERT_TRUE(b == 0x55 || b == 0) << int(b);  // codes, or padding
  EXPECT_THROW(cuda::int4_layout_codes(out.ptr, words.ptr, Int4Packing::kGptq, nullptr, 13, 64,
                                       nullptr),
               Error);
}

}  // namespace
}  // namespace flashserve
