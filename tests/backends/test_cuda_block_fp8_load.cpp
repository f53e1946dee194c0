// The CUDA backend's block-wise FP8 loads (backends/cuda/cuda_block_fp8.cpp: the codes uploaded
// from the mapped file part by part, the block scales padded) read back after load_weight /
// load_stacked_weight: the committed block-FP8 model's projections alone and stacked as
// LlamaModel stacks them (q/k/v, gate/up) hold the parts' codes byte for byte and their scales
// in the padded layout. Parts that cannot stack packed (a part but the last not a whole number
// of row blocks) must be the bf16 rounding of their f32 values, bitwise.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/dtype.h"
#include "tests/kernels/device_test_util.h"
#include "weights/block_fp8_weights.h"
#include "weights/loaded_model.h"

namespace flashserve {
namespace {

using test::download;

const std::string kData = std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/";

// The loaded weight `b` holds `parts` stacked: their codes one after another, and each row
// block's scales padded to ld, a multiple of 4 (the padding never read).
void expect_packed(Backend& backend, const Buffer& b,
                   const std::vector<const BlockFp8Weight*>& parts, const std::string& what) {
  SCOPED_TRACE(what);
  backend.synchronize();
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  const int64_t blocks_k = parts[0]->scale_cols(), ld = (blocks_k + 3) / 4 * 4;
  for (const BlockFp8Weight* p : parts) {
    codes.insert(codes.end(), p->codes, p->codes + p->rows * p->cols);
    scales.insert(scales.end(), p->scales.begin(), p->scales.end());  // [row blocks, blocks_k]
  }
  ASSERT_EQ(b.tensor.dtype, DType::kF8E4M3);
  ASSERT_EQ(b.tensor.dim(0) * b.tensor.dim(1), int64_t(codes.size()));
  ASSERT_EQ(b.tensor.block_n, parts[0]->block_rows);
  ASSERT_EQ(b.tensor.block_k, parts[0]->block_cols);
  ASSERT_EQ(b.tensor.block_scale_ld, ld);
  EXPECT_EQ(download<uint8_t>(b.tensor.data, codes.size()), codes);
  const size_t blocks_n = scales.size() / size_t(blocks_k);
  const std::vector<float> got = download<float>(b.tensor.block_scale, blocks_n * ld);
  for (size_t r = 0; r < blocks_n; ++r)
    for (int64_t c = 0; c < blocks_k; ++c)
      EXPECT_EQ(got[r * ld + c], scales[r * blocks_k + c]) << "row block " << r << " block " << c;
}

TEST(CudaBlockFp8Load, PartsStackedOnTheGpu) {
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  auto model = load_model(kData + "block_fp8");
  const std::vector<std::vector<std::string>> stacks = {
      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
      {"mlp.gate_proj", "mlp.up_proj"},
      {"self_attn.o_proj"},
      {"mlp.down_proj"}};
  for (const auto& names : stacks) {
    std::vector<TensorView> views;
    std::vector<const BlockFp8Weight*> parts;
    for (const std::string& p : names) {
      views.push_back(model->tensor("model.layers.0." + p + ".weight"));
      ASSERT_TRUE(views.back().block_fp8 && !views.back().data) << p;  // packed, no values
      parts.push_back(views.back().block_fp8.get());
    }
    ASSERT_TRUE(block_fp8_stackable(parts)) << names[0];
    if (views.size() == 1)
      expect_packed(*backend, backend->load_weight(views[0]), parts, names[0]);
    else
      expect_packed(*backend, backend->load_stacked_weight(views), parts, names[0] + " stacked");
  }
}

// A random [rows, cols] weight of 16x16 blocks (any non-NaN code), holding its codes.
std::shared_ptr<const BlockFp8Weight> random_weight(int64_t rows, int64_t cols, std::mt19937& rng) {
  auto w = std::make_shared<BlockFp8Weight>();
  w->rows = rows, w->cols = cols, w->block_rows = 16, w->block_cols = 16;
  std::vector<uint8_t> codes(size_t(rows * cols));
  for (uint8_t& c : codes) c = uint8_t(rng() % 0x7F) | uint8_t(rng() & 0x80);
  w->own_codes(std::move(codes));
  std::uniform_real_distribution<float> scale(0.01f, 4.f);
  w->scales.resize(size_t(w->scale_rows() * w->scale_cols()));
  for (float& s : w->scales) s = scale(rng);
  return w;
}

TEST(CudaBlockFp8Load, PartsThatDoNotStackBecomeBf16) {
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  std::mt19937 rng(5);
  // 20 rows: not a whole number of 16-row blocks, so the second part's blocks would shift.
  std::vector<TensorView> views(2);
  std::vector<const BlockFp8Weight*> parts;
  for (int64_t rows : {20, 24}) {
    TensorView& v = views[parts.size()];
    v.shape = {rows, 40};  // 40 columns: a partial last column block
    v.block_fp8 = random_weight(rows, 40, rng);
    parts.push_back(v.block_fp8.get());
  }
  ASSERT_FALSE(block_fp8_stackable(parts));
  const Buffer b = backend->load_stacked_weight(views);
  backend->synchronize();
  std::vector<uint16_t> want;
  for (const BlockFp8Weight* p : parts)
    for (float v : dequantize_block_fp8(*p)) want.push_back(float_to_bf16_bits(v));
  ASSERT_EQ(b.tensor.dtype, DType::kBF16);
  EXPECT_EQ(download<uint16_t>(b.tensor.data, want.size()), want);
  // One part alone always stacks: packed.
  expect_packed(*backend, backend->load_weight(views[0]), {parts[0]}, "20 rows alone");
}

}  // namespace
}  // namespace flashserve
