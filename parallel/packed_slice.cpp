// Packed tensor-parallel slices (packed_slice.h). Every packed array is a row-major matrix and a
// cut is a range of its rows or of its columns: int4 words as bytes (kRows [rows, cols / 2],
// kGptq [cols / 8, rows * 4], kAwq [cols, rows / 2]), int4 scales and zero points
// [groups, rows], FP8 codes [rows, cols] and block scales [scale_rows, scale_cols].
#include "parallel/packed_slice.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "core/error.h"
#include "weights/block_fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/packed_views.h"

namespace flashserve {

namespace {

using Kind = WeightSplit::Kind;
const std::string kRun = " run dequantized (f32), not packed: ";  // what each refusal means

// Rows [r0, r0 + nr) and columns [c0, c0 + nc) of `m`, a row-major matrix of `cols` columns.
template <typename T>
std::vector<T> rect(const T* m, int64_t cols, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  std::vector<T> out(size_t(nr * nc));
  for (int64_t r = 0; r < nr; ++r)
    std::memcpy(out.data() + r * nc, m + (r0 + r) * cols + c0, size_t(nc) * sizeof(T));
  return out;
}

// Rows [b, b + n) of `m` [outer, inner] when `inner_cut` is false, else its columns [b, b + n).
template <typename T>
std::vector<T> cut(const T* m, int64_t outer, int64_t inner, bool inner_cut, int64_t b,
                   int64_t n) {
  return inner_cut ? rect(m, inner, 0, outer, b, n) : rect(m, inner, b, n, 0, inner);
}

std::string int4_refusal(const Int4Stored& w, const WeightSplit& s) {
  const int64_t b = s.begin, n = s.count;
  if (s.kind == Kind::kRows)
    return w.packing != Int4Packing::kRows && (b % 8 != 0 || n % 8 != 0)
               ? "GPTQ and AWQ int4 weights cut at output rows off multiples of 8" + kRun +
                     "both pack their rows by eights"
               : "";
  if (!w.perm.empty())
    return "act-order int4 weights cut by input columns" + kRun +
           "the permutation spreads a rank's columns over every group";
  if (b % 8 != 0 || n % 8 != 0)
    return "int4 weights cut at input columns off multiples of 8" + kRun +
           "eight columns share a word";
  if (w.groups() > 1 && (b % w.group_size != 0 || n % w.group_size != 0))
    return "int4 weights of group size " + std::to_string(w.group_size) +
           " cut at input columns off group boundaries" + kRun +
           "a rank's columns must be whole groups";
  return "";
}

Int4Stored cut_int4(const Int4Stored& w, const WeightSplit& s) {
  const bool by_rows = s.kind == Kind::kRows;
  const int64_t b = s.begin, n = s.count, rows = w.rows, cols = w.cols;
  Int4Stored out;
  out.packing = w.packing;
  out.rows = by_rows ? n : rows;
  out.cols = by_rows ? cols : n;
  // One group spans a whole row (per-channel), so it spans any cut of the columns.
  out.group_size = by_rows || w.groups() > 1 ? w.group_size : n;
  if (by_rows) out.perm = w.perm;  // column cuts of act-order weights are refused
  std::vector<uint8_t> words;
  if (w.packing == Int4Packing::kRows)
    words = by_rows ? cut(w.words, rows, cols / 2, false, b, n)
                    : cut(w.words, rows, cols / 2, true, b / 2, n / 2);
  else if (w.packing == Int4Packing::kGptq)
    words = by_rows ? cut(w.words, cols / 8, rows * 4, true, b * 4, n * 4)
                    : cut(w.words, cols / 8, rows * 4, false, b / 8, n / 8);
  else  // kAwq
    words = by_rows ? cut(w.words, cols, rows / 2, true, b / 2, n / 2)
                    : cut(w.words, cols, rows / 2, false, b, n);
  out.owned = std::make_shared<const std::vector<uint8_t>>(std::move(words));
  out.words = out.owned->data();
  // [groups, rows]: a row cut keeps every group's range of rows, a column cut its groups.
  const int64_t g0 = by_rows ? b : b / w.group_size, ng = by_rows ? n : out.groups();
  out.scales = cut(w.scales.data(), w.groups(), rows, by_rows, g0, ng);
  out.zeros = cut(w.zeros.data(), w.groups(), rows, by_rows, g0, ng);
  return out;
}

// Whether [b, b + n) of `total` starts on a block and ends on one or at the end (the last
// blocks may be partial).
bool on_blocks(int64_t b, int64_t n, int64_t total, int64_t block) {
  return b % block == 0 && (n % block == 0 || b + n == total);
}

std::string block_fp8_refusal(const BlockFp8Weight& w, const WeightSplit& s) {
  const bool by_rows = s.kind == Kind::kRows;
  if (by_rows ? on_blocks(s.begin, s.count, w.rows, w.block_rows)
              : on_blocks(s.begin, s.count, w.cols, w.block_cols))
    return "";
  return "block-FP8 weights of " + std::to_string(w.block_rows) + "x" +
         std::to_string(w.block_cols) + " blocks cut at " + (by_rows ? "rows" : "columns") +
         " off block boundaries" + kRun + "a rank's slice must hold whole blocks";
}

BlockFp8Weight cut_block_fp8(const BlockFp8Weight& w, const WeightSplit& s) {
  const bool by_rows = s.kind == Kind::kRows;
  const int64_t b = s.begin, n = s.count;
  BlockFp8Weight out;
  out.rows = by_rows ? n : w.rows;
  out.cols = by_rows ? w.cols : n;
  out.block_rows = w.block_rows, out.block_cols = w.block_cols;
  out.own_codes(cut(w.codes, w.rows, w.cols, !by_rows, b, n));
  out.scales = by_rows ? cut(w.scales.data(), w.scale_rows(), w.scale_cols(), false,
                             b / w.block_rows, out.scale_rows())
                       : cut(w.scales.data(), w.scale_rows(), w.scale_cols(), true,
                             b / w.block_cols, out.scale_cols());
  return out;
}

// Each reason once per process (the ranks load their slices on threads of their own).
void say_once(const std::string& why) {
  static std::mutex mutex;
  static std::set<std::string> said;
  const std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(why).second)
    std::fprintf(stderr, "flashserve: tensor parallelism: %s\n", why.c_str());
}

}  // namespace

std::string packed_cut_refusal(const TensorView& w, const WeightSplit& s) {
  return w.int4 ? int4_refusal(*w.int4, s) : block_fp8_refusal(*w.block_fp8, s);
}

std::optional<TensorView> slice_packed(const TensorView& w, const WeightSplit& s) {
  const size_t dim = s.kind == Kind::kRows ? 0 : 1;
  FS_CHECK(is_packed(w) && s.kind != Kind::kWhole && w.shape.size() == 2, "slice_packed: a ",
           w.shape.size(), "-d weight", is_packed(w) ? "" : " that is not packed");
  FS_CHECK(s.begin >= 0 && s.count >= 0 && s.begin + s.count <= w.shape[dim], "cannot cut ",
           s.count, " from ", s.begin, " of dim ", dim, " of a packed ", shape_str(w.shape),
           " weight");
  const std::string why = packed_cut_refusal(w, s);
  if (!why.empty()) {
    say_once(why);
    return std::nullopt;
  }
  TensorView out = w;
  out.shape[dim] = s.count;
  if (w.int4)
    out.int4 = std::make_shared<const Int4Stored>(cut_int4(*w.int4, s));
  else
    out.block_fp8 = std::make_shared<const BlockFp8Weight>(cut_block_fp8(*w.block_fp8, s));
  return out;
}

}  // namespace flashserve
