// Packed tensor-parallel slices (parallel/packed_slice.h): for every int4 packing (GPTQ symmetric
// and asymmetric, act-order, AWQ, compressed-tensors by group and by channel) and block-wise
// FP8, a cut that stays packed holds exactly the values of the same cut of the f32 weight, owns
// its memory (the source poisoned afterwards changes nothing), and the cuts that split a group,
// word or block are refused (slice_weight then slices the f32 values). Random weights, and the
// committed quantized checkpoints cut as TP 2 cuts them.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "core/error.h"
#include "parallel/packed_slice.h"
#include "weights/block_fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/packed_views.h"

namespace flashserve {
namespace {

using K = WeightSplit::Kind;

// A packed weight's view, and its codes' memory (writable, to be poisoned).
struct Packed {
  TensorView view;
  std::shared_ptr<std::vector<uint8_t>> bytes;
};

Packed random_int4(Int4Packing packing, int64_t rows, int64_t cols, int64_t group_size,
                   bool sym, bool act_order, uint32_t seed) {
  std::mt19937 rng(seed);
  auto w = std::make_shared<Int4Stored>();
  w->packing = packing, w->rows = rows, w->cols = cols, w->group_size = group_size;
  auto bytes = std::make_shared<std::vector<uint8_t>>(w->word_bytes());
  for (uint8_t& b : *bytes) b = uint8_t(rng());  // any nibble is a code
  w->words = bytes->data();
  w->owned = bytes;
  std::uniform_real_distribution<float> scale(0.01f, 0.2f);
  for (int64_t i = 0; i < w->groups() * rows; ++i) {
    w->scales.push_back(scale(rng));
    w->zeros.push_back(sym ? 8 : uint8_t(rng() % 16));
  }
  if (act_order) {
    w->perm.resize(size_t(cols));
    std::iota(w->perm.begin(), w->perm.end(), 0);
    std::shuffle(w->perm.begin(), w->perm.end(), rng);
  }
  Packed p;
  p.view.dtype = DType::kI4;
  p.view.shape = {rows, cols};
  p.view.int4 = w;
  p.bytes = bytes;
  return p;
}

Packed random_block_fp8(int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                        uint32_t seed) {
  std::mt19937 rng(seed);
  auto w = std::make_shared<BlockFp8Weight>();
  w->rows = rows, w->cols = cols, w->block_rows = block_rows, w->block_cols = block_cols;
  auto bytes = std::make_shared<std::vector<uint8_t>>(size_t(rows * cols));
  for (uint8_t& c : *bytes) c = uint8_t(rng() % 0x7F) | uint8_t(rng() & 0x80);  // no NaN (0x7F)
  w->codes = bytes->data();
  w->owned = bytes;
  std::uniform_real_distribution<float> scale(0.5f, 3.f);
  for (int64_t i = 0; i < w->scale_rows() * w->scale_cols(); ++i) w->scales.push_back(scale(rng));
  Packed p;
  p.view.shape = {rows, cols};
  p.view.block_fp8 = w;
  p.bytes = bytes;
  return p;
}

// The cut of w's f32 values, as slice_weight makes it of an unpacked weight.
std::vector<float> values_cut(const TensorView& w, const WeightSplit& s) {
  std::vector<float> values;
  std::vector<char> storage;
  const TensorView cut = slice_weight(unpacked_view(w, &values), s, storage);
  const float* at = static_cast<const float*>(cut.data);
  return std::vector<float>(at, at + cut.numel());
}

std::vector<float> values_of(const TensorView& w) {
  std::vector<float> values;
  const TensorView v = unpacked_view(w, &values);
  const float* at = static_cast<const float*>(v.data);
  return std::vector<float>(at, at + v.numel());
}

std::string cut_str(const WeightSplit& s) {
  return std::string(s.kind == K::kRows ? "rows " : "columns ") + std::to_string(s.begin) + "+" +
         std::to_string(s.count);
}

// The cut stays packed, holds the f32 cut's values bit for bit, and keeps them when the
// source's codes (p.bytes, where the test owns them) are poisoned.
void expect_packed_cut(const Packed& p, const WeightSplit& s) {
  SCOPED_TRACE(cut_str(s));
  EXPECT_EQ(packed_cut_refusal(p.view, s), "");
  const std::optional<TensorView> cut = slice_packed(p.view, s);
  ASSERT_TRUE(cut);
  ASSERT_TRUE(is_packed(*cut));
  EXPECT_EQ(cut->shape[s.kind == K::kRows ? 0 : 1], s.count);
  const std::vector<float> want = values_cut(p.view, s);
  EXPECT_EQ(values_of(*cut), want);
  if (!p.bytes) return;
  const std::vector<uint8_t> kept = *p.bytes;
  std::fill(p.bytes->begin(), p.bytes->end(), uint8_t(0x33));
  EXPECT_EQ(values_of(*cut), want);
  *p.bytes = kept;
}

void expect_refused(const Packed& p, const WeightSplit& s, const std::string& reason) {
  SCOPED_TRACE(cut_str(s));
  EXPECT_NE(packed_cut_refusal(p.view, s).find(reason), std::string::npos)
      << packed_cut_refusal(p.view, s);
  EXPECT_FALSE(slice_packed(p.view, s));
  // slice_weight then slices the f32 values.
  std::vector<char> storage;
  const TensorView f32 = slice_weight(p.view, s, storage);
  EXPECT_FALSE(is_packed(f32));
  const float* at = static_cast<const float*>(f32.data);
  EXPECT_EQ(std::vector<float>(at, at + f32.numel()), values_cut(p.view, s));
}

struct Int4Case {
  const char* name;
  Int4Packing packing;
  int64_t group_size;  // 256: one group per row (per-channel)
  bool sym, act_order;
};
const Int4Case kInt4Cases[] = {
    {"gptq sym", Int4Packing::kGptq, 32, true, false},
    {"gptq asym", Int4Packing::kGptq, 64, false, false},
    {"gptq act-order", Int4Packing::kGptq, 32, false, true},
    {"awq", Int4Packing::kAwq, 32, false, false},
    {"ct group asym", Int4Packing::kRows, 64, false, false},
    {"ct group act-order", Int4Packing::kRows, 32, false, true},
    {"ct channel sym", Int4Packing::kRows, 256, true, false},
};

TEST(PackedSlice, Int4RowCutsKeepTheirRowsPacked) {
  uint32_t seed = 1;
  for (const Int4Case& c : kInt4Cases) {
    SCOPED_TRACE(c.name);
    Packed p = random_int4(c.packing, 48, 256, c.group_size, c.sym, c.act_order, seed++);
    for (WeightSplit s : {WeightSplit{K::kRows, 0, 16}, {K::kRows, 16, 32}, {K::kRows, 40, 8},
                          {K::kRows, 0, 48}})
      expect_packed_cut(p, s);
    if (c.packing == Int4Packing::kRows) {  // one row to a word row: any rows
      expect_packed_cut(p, {K::kRows, 3, 5});
      expect_packed_cut(p, {K::kRows, 1, 46});
    } else {
      expect_refused(p, {K::kRows, 4, 8}, "multiples of 8");
      expect_refused(p, {K::kRows, 8, 12}, "multiples of 8");
    }
  }
}

TEST(PackedSlice, Int4ColumnCutsKeepWholeGroupsPacked) {
  uint32_t seed = 100;
  for (const Int4Case& c : kInt4Cases) {
    SCOPED_TRACE(c.name);
    Packed p = random_int4(c.packing, 48, 256, c.group_size, c.sym, c.act_order, seed++);
    if (c.act_order) {  // every column cut, even group-aligned, runs on the f32 values
      expect_refused(p, {K::kColumns, 0, 128}, "act-order");
      expect_refused(p, {K::kColumns, 64, 64}, "act-order");
      continue;
    }
    const int64_t g = std::min<int64_t>(c.group_size, 64);
    for (WeightSplit s : {WeightSplit{K::kColumns, 0, 128}, {K::kColumns, 128, 128},
                          {K::kColumns, g, 2 * g}, {K::kColumns, 256 - g, g}})
      expect_packed_cut(p, s);
    if (c.group_size == 256) {  // one group: any cut on the words' eights
      expect_packed_cut(p, {K::kColumns, 8, 16});
      expect_packed_cut(p, {K::kColumns, 248, 8});
      expect_refused(p, {K::kColumns, 4, 8}, "multiples of 8");
    } else {
      expect_refused(p, {K::kColumns, 16, c.group_size}, "group boundaries");
      expect_refused(p, {K::kColumns, 0, c.group_size + 8}, "group boundaries");
      expect_refused(p, {K::kColumns, 4, 8}, "multiples of 8");
    }
  }
}

TEST(PackedSlice, BlockFp8CutsOnBlocksStayPackedAndLastBlocksMayBePartial) {
  Packed p = random_block_fp8(40, 72, 16, 32, 7);  // blocks partial at the end: 8 rows, 8 cols
  for (WeightSplit s : {WeightSplit{K::kRows, 0, 16}, {K::kRows, 16, 24}, {K::kRows, 32, 8},
                        {K::kRows, 0, 40}, {K::kColumns, 0, 32}, {K::kColumns, 32, 40},
                        {K::kColumns, 64, 8}, {K::kColumns, 0, 64}})
    expect_packed_cut(p, s);
  for (WeightSplit s : {WeightSplit{K::kRows, 8, 16}, {K::kRows, 0, 20}, {K::kColumns, 16, 32},
                        {K::kColumns, 32, 16}})
    expect_refused(p, s, "block boundaries");
}

// The committed one-layer checkpoints (tests/weights/data/quantized/), each packed projection
// cut as TP 2 cuts it on both ranks: packed and exact where the cut allows, else refused and
// sliced as f32. Their o_proj has one int4 group per row (32 columns, group 32), so only
// act-order's down_proj (two groups, a permutation) is refused.
TEST(PackedSlice, CommittedCheckpointsCutForTensorParallel2) {
  const std::string data = std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/";
  for (const char* folder : {"gptq_sym", "gptq_asym_actorder", "awq", "ct_group_asym",
                             "ct_channel_sym", "block_fp8"}) {
    SCOPED_TRACE(folder);
    const auto model = load_model(data + folder);
    const ModelConfig& c = model->config();
    int packed = 0, refused = 0;
    for (int rank : {0, 1})
      for (const char* proj : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                               "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj",
                               "mlp.down_proj"}) {
        const std::string name = std::string("model.layers.0.") + proj + ".weight";
        const Packed p{model->tensor(name), nullptr};
        if (!is_packed(p.view)) continue;
        SCOPED_TRACE(name);
        const WeightSplit s = weight_split(make_shard_plan(c, 2, rank), c, name);
        if (packed_cut_refusal(p.view, s).empty()) {
          expect_packed_cut(p, s);
          ++packed;
        } else {
          expect_refused(p, s, "act-order");
          ++refused;
        }
      }
    const bool act_order = std::string(folder) == "gptq_asym_actorder" ||
                           std::string(folder) == "ct_group_asym";
    EXPECT_EQ(refused, act_order ? 2 : 0);
    EXPECT_GE(packed, 10);
  }
}

TEST(PackedSlice, CutsOutsideTheWeightAreErrors) {
  const Packed p = random_int4(Int4Packing::kRows, 16, 64, 32, true, false, 3);
  EXPECT_THROW(slice_packed(p.view, {K::kRows, 8, 16}), Error);
  EXPECT_THROW(slice_packed(p.view, {K::kColumns, -8, 16}), Error);
}

}  // namespace
}  // namespace flashserve
