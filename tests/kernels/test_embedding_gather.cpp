// The row copies (kernels/embedding_gather.h) against their CPU twins
// (kernels/cpu/embedding_gather_ref.h), bit for bit: the embedding lookup with repeated ids and
// the first and last rows of the table, over row widths of 1 to 8200 values, and the gather of
// rows in a shuffled order with repeats, rows of any byte length. An id outside the vocabulary
// (a bug upstream: ids are validated before a step) gives a row of zeros, not a stray read.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/cpu/embedding_gather_ref.h"
#include "kernels/embedding_gather.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {
namespace {

TEST(EmbeddingGatherKernels, EmbeddingMatchesTwin) {
  std::mt19937 rng(31);
  for (auto [n, hidden, vocab] : {std::tuple{1, 1, 3}, {7, 64, 50}, {33, 300, 1000}, {4, 8200, 17}}) {
    const std::vector<uint16_t> table = to_bf16(random_bf16(size_t(vocab) * hidden, rng));
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = int32_t(rng() % uint32_t(vocab));
    ids[0] = vocab - 1;
    if (n > 2) ids[1] = 0, ids[2] = 0;
    Dev<uint16_t> dtable(table), dout(size_t(n) * hidden);
    Dev<int32_t> dids(ids);
    dout.poison();
    cuda::embedding_bf16(dout.ptr, dids.ptr, dtable.ptr, n, hidden, vocab, nullptr);
    std::vector<uint16_t> want(size_t(n) * hidden);
    ref::embedding(want.data(), ids.data(), table.data(), n, int64_t(hidden) * 2, vocab);
    EXPECT_EQ(dout.get(), want) << "n " << n << " hidden " << hidden;
  }
}

TEST(EmbeddingGatherKernels, EmbeddingOfAnIdOutsideTheVocabIsZeros) {
  const std::vector<uint16_t> table(4 * 8, 0x3f80);  // 1.0
  Dev<uint16_t> dtable(table), dout(2 * 8);
  Dev<int32_t> dids(std::vector<int32_t>{1, 4});
  cuda::embedding_bf16(dout.ptr, dids.ptr, dtable.ptr, 2, 8, 4, nullptr);
  const std::vector<uint16_t> got = dout.get();
  EXPECT_EQ(std::vector<uint16_t>(got.begin(), got.begin() + 8), std::vector<uint16_t>(8, 0x3f80));
  EXPECT_EQ(std::vector<uint16_t>(got.begin() + 8, got.end()), std::vector<uint16_t>(8, 0));
  std::vector<uint16_t> host(16);
  EXPECT_ANY_THROW(ref::embedding(host.data(), std::vector<int32_t>{1, 4}.data(), table.data(), 2, 16, 4));
}

TEST(EmbeddingGatherKernels, GatherRowsMatchesTwin) {
  std::mt19937 rng(32);
  for (auto [x_rows, rows, row_bytes] : {std::tuple{1, 1, 2}, {9, 4, 6}, {40, 40, 4096}, {7, 12, 32004}}) {
    std::vector<uint8_t> x(size_t(x_rows) * row_bytes);
    for (uint8_t& b : x) b = uint8_t(rng());
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) ids[r] = int32_t((r * 7 + 3) % x_rows);
    std::shuffle(ids.begin(), ids.end(), rng);
    Dev<uint8_t> dx(x), dout(size_t(rows) * row_bytes);
    Dev<int32_t> dids(ids);
    dout.poison();
    cuda::gather_rows(dout.ptr, dx.ptr, dids.ptr, rows, row_bytes, nullptr);
    std::vector<uint8_t> want(size_t(rows) * row_bytes);
    ref::gather_rows(want.data(), x.data(), ids.data(), rows, row_bytes, x_rows);
    EXPECT_EQ(dout.get(), want) << rows << " rows of " << row_bytes << " bytes";
  }
}

}  // namespace
}  // namespace flashserve::test
