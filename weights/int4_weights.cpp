// int4 checkpoints read (int4_weights.h): each format's scales, zero points and g_idx decoded
// and checked, its codes left in its words (Int4Stored::code reads them where they are); the
// columns ordered by group once (act-order); unpack_int4 packs the internal layout from that.
// Format descriptions followed (docs/QUANTIZATION.md has them in full):
//   GPTQ: qweight int32 [in/8, out], input i in bits 4(i%8) of row i/8; qzeros int32
//     [groups, out/8], output o in bits 4(o%8); scales [groups, out]; g_idx int32 [in]; the
//     classic files ("gptq") store zero - 1, gptq_v2 the zero itself.
//   AWQ gemm: qweight int32 [in, out/8] and qzeros [groups, out/8], output 8c+j in the nibble
//     kAwqNibble[j]; scales [groups, out]; w = (q - zero) * scale.
//   compressed-tensors pack-quantized: weight_packed int32 [out, in/8], input i in bits 4(i%8),
//     values offset by +8 (signed int4 stored unsigned); weight_scale [out, groups];
//     weight_zero_point (asymmetric) int32 [ceil(out/8), groups] packed along out, also +8;
//     weight_shape [out, in]; weight_g_idx [in] with actorder.
#include "weights/int4_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"
#include "weights/every_core.h"

namespace flashserve {

namespace {

class Reader {
 public:
  Reader(const Int4Source& s, const char* format) : s_(s), format_(format) {}
  std::string name(const std::string& suffix) const { return s_.module + "." + suffix; }

  // The entry `suffix` with one of `dtypes` and shape `shape`; nullptr if absent and optional.
  const SafetensorsEntry* get(const std::string& suffix, std::initializer_list<const char*> dtypes,
                              const std::vector<int64_t>& shape, bool optional = false) const {
    const SafetensorsEntry* e = s_.find(suffix);
    if (!e && optional) return nullptr;
    if (!e) FS_THROW(s_.path, ": missing tensor '", name(suffix), "' (", format_, ")");
    bool dtype_ok = false;
    std::string want;
    for (const char* d : dtypes) {
      dtype_ok |= e->dtype == d;
      want += (want.empty() ? "" : " or ") + std::string(d);
    }
    if (!dtype_ok)
      FS_THROW(s_.path, ": tensor '", name(suffix), "' has dtype ", e->dtype, "; ", format_,
               " stores it as ", want);
    if (e->shape != shape)
      FS_THROW(s_.path, ": tensor '", name(suffix), "' has shape ", shape_str(e->shape), " but ",
               format_, " needs ", shape_str(shape), " here");
    return e;
  }

  std::vector<int32_t> ints(const SafetensorsEntry& e) const {  // I32, or I64 / I8 widened
    const size_t n = size_t(e.nbytes / (e.dtype == "I64" ? 8 : e.dtype == "I8" ? 1 : 4));
    std::vector<int32_t> out(n);
    for (size_t i = 0; i < n; ++i) {
      if (e.dtype == "I64") {
        int64_t v;
        std::memcpy(&v, e.data + 8 * i, 8);
        out[i] = v < INT32_MIN || v > INT32_MAX ? INT32_MIN : int32_t(v);
      } else if (e.dtype == "I8") {
        out[i] = int8_t(e.data[i]);
      } else {
        std::memcpy(&out[i], e.data + 4 * i, 4);
      }
    }
    return out;
  }

  // Scales [a, b] as f32, checked finite and >= 0.
  std::vector<float> scales(const std::string& suffix, const std::vector<int64_t>& shape) const {
    const SafetensorsEntry& e = *get(suffix, {"F16", "BF16", "F32"}, shape);
    const size_t n = size_t(e.nbytes / (e.dtype == "F32" ? 4 : 2));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; ++i) {
      if (e.dtype == "F32") {
        std::memcpy(&out[i], e.data + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, e.data + 2 * i, 2);
        out[i] = e.dtype == "F16" ? f16_bits_to_float(h) : bf16_bits_to_float(h);
      }
      // |code - zero| <= 16: a scale past FLT_MAX / 16 would make an infinite weight.
      if (!std::isfinite(16.f * out[i]) || out[i] < 0.f)
        FS_THROW(s_.path, ": tensor '", name(suffix), "' holds ", out[i],
                 "; scales must be finite, >= 0 and at most FLT_MAX / 16");
    }
    return out;
  }

  // g_idx [cols] from `suffix`, or i / group_size when the checkpoint has none.
  std::vector<int32_t> g_idx(const std::string& suffix, int64_t cols, int64_t group_size,
                             bool required) const {
    std::vector<int32_t> g(static_cast<size_t>(cols));
    const SafetensorsEntry* e = get(suffix, {"I32", "I64"}, {cols}, !required);
    if (!e) {
      for (int64_t i = 0; i < cols; ++i) g[size_t(i)] = int32_t(i / group_size);
      return g;
    }
    g = ints(*e);
    for (int32_t v : g)
      if (v < 0 || v >= cols / group_size)
        FS_THROW(s_.path, ": tensor '", name(suffix), "' holds group ", v, "; there are ",
                 cols / group_size, " groups");
    return g;
  }

  [[noreturn]] void fail(const std::string& what) const { FS_THROW(s_.path, ": ", what); }
  const Int4Source& s_;
  const char* format_;
};

uint8_t nibble(int32_t word, int index) { return uint8_t((uint32_t(word) >> (4 * index)) & 0xF); }

// GPTQ and AWQ: qweight, then zero points packed along the rows (qzeros [groups, rows / 8]),
// scales [groups, rows]; returns g_idx (AWQ has none: i / group_size).
std::vector<int32_t> read_gptq_awq(Int4Stored& w, const QuantConfig& q, const Reader& rd) {
  const bool awq = q.format == QuantFormat::kAwq;
  const int64_t rows = w.rows, cols = w.cols, groups = w.groups();
  w.packing = awq ? Int4Packing::kAwq : Int4Packing::kGptq;
  w.words = rd.get("qweight", {"I32"}, awq ? std::vector<int64_t>{cols, rows / 8}
                                           : std::vector<int64_t>{cols / 8, rows})->data;
  const std::vector<int32_t> qz = rd.ints(*rd.get("qzeros", {"I32"}, {groups, rows / 8}));
  w.scales = rd.scales("scales", {groups, rows});
  w.zeros.resize(size_t(groups * rows));
  const int offset = awq ? 0 : q.gptq_zero_offset;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < rows; ++r) {
      const int at = awq ? kAwqNibble[r % 8] : int(r % 8);
      w.zeros[size_t(g * rows + r)] = uint8_t(nibble(qz[size_t(g * (rows / 8) + r / 8)], at) + offset);
    }
  return rd.g_idx("g_idx", cols, w.group_size, !awq && q.desc_act);
}

// compressed-tensors pack-quantized: weight_shape, weight_packed, weight_scale [rows, groups]
// (kept transposed), weight_g_idx (returned) and the asymmetric zero points.
std::vector<int32_t> read_packed(Int4Stored& w, const QuantConfig& q, const Reader& rd) {
  const int64_t rows = w.rows, cols = w.cols, groups = w.groups();
  const SafetensorsEntry* shape = rd.get("weight_shape", {"I64", "I32"}, {2}, true);
  if (shape && rd.ints(*shape) != std::vector<int32_t>{int32_t(rows), int32_t(cols)})
    rd.fail("tensor '" + rd.name("weight_shape") + "' does not say [" + std::to_string(rows) +
            ", " + std::to_string(cols) + "], the projection's shape");
  w.packing = Int4Packing::kRows;
  w.words = rd.get("weight_packed", {"I32"}, {rows, cols / 8})->data;
  const std::vector<float> sc = rd.scales("weight_scale", {rows, groups});
  w.scales.resize(sc.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      w.scales[size_t(g * rows + r)] = sc[size_t(r * groups + g)];
  std::vector<int32_t> g_idx = rd.g_idx("weight_g_idx", cols, w.group_size, q.desc_act);
  w.zeros.assign(size_t(rows * groups), 8);  // symmetric: signed zero 0, stored +8
  if (q.sym) return g_idx;
  // Zero points packed along the rows (int32 [ceil(rows/8), groups]), or one int8 each.
  const SafetensorsEntry* stored = rd.s_.find("weight_zero_point");
  if (!stored || stored->dtype != "I8") {
    const std::vector<int32_t> z =
        rd.ints(*rd.get("weight_zero_point", {"I32"}, {(rows + 7) / 8, groups}));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < groups; ++g)
        w.zeros[size_t(g * rows + r)] = nibble(z[size_t((r / 8) * groups + g)], int(r % 8));
    return g_idx;
  }
  const std::vector<int32_t> z = rd.ints(*rd.get("weight_zero_point", {"I8"}, {rows, groups}));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int32_t v = z[size_t(r * groups + g)];
      if (v < -8 || v > 7)
        rd.fail("tensor '" + rd.name("weight_zero_point") + "' holds " + std::to_string(v) +
                "; int4 zero points are -8..7");
      w.zeros[size_t(g * rows + r)] = uint8_t(v + 8);
    }
  return g_idx;
}

// Act-order: the columns ordered by group (g_idx in any order; each group must hold group_size
// columns); empty when that is the identity.
std::vector<int32_t> column_order(const std::vector<int32_t>& g_idx, int64_t cols, int64_t gs,
                                  const Reader& rd) {
  std::vector<int32_t> order(static_cast<size_t>(cols));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return g_idx[size_t(a)] < g_idx[size_t(b)]; });
  bool identity = true;
  for (int64_t j = 0; j < cols; ++j) {
    if (g_idx[size_t(order[size_t(j)])] != j / gs)
      rd.fail("the g_idx of '" + rd.s_.module + "' does not give every group " +
              std::to_string(gs) + " columns (group " + std::to_string(j / gs) + ")");
    identity &= order[size_t(j)] == j;
  }
  return identity ? std::vector<int32_t>{} : order;
}

// kRows words [rows, cols / 8] of `w`'s rows in `order` (empty: as they are).
std::shared_ptr<const std::vector<uint8_t>> row_words(const Int4Stored& w,
                                                      const std::vector<int>& order) {
  auto out = std::make_shared<std::vector<uint8_t>>(w.word_bytes(), 0);
  const size_t row_bytes = size_t(w.cols / 2);
  for (int64_t r = 0; r < w.rows; ++r) {
    const int64_t s = order.empty() ? r : order[size_t(r)];
    FS_CHECK(s >= 0 && s < w.rows, "rewrite_int4_rows: bad source row ", s);
    uint8_t* row = out->data() + size_t(r) * row_bytes;
    for (int64_t i = 0; i < w.cols; ++i) row[i / 2] |= uint8_t(w.code(s, i) << (4 * (i % 2)));
  }
  return out;
}

}  // namespace

uint8_t Int4Stored::code(int64_t r, int64_t i) const {
  int64_t word = r * (cols / 8) + i / 8;  // kRows
  int shift = int(4 * (i % 8));
  if (packing == Int4Packing::kGptq) word = (i / 8) * rows + r;
  if (packing == Int4Packing::kAwq) {
    word = i * (rows / 8) + r / 8;
    shift = 4 * kAwqNibble[r % 8];
  }
  uint32_t v;
  std::memcpy(&v, words + 4 * word, 4);
  return uint8_t((v >> shift) & 0xF);
}

Int4Weight unpack_int4(const Int4Stored& s) {
  Int4Weight w;
  w.rows = s.rows, w.cols = s.cols, w.group_size = s.group_size, w.perm = s.perm;
  const int64_t groups = s.groups();
  w.packed.assign(s.word_bytes(), 0);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t j = 0; j < s.cols; ++j) {
      const uint8_t c = s.code(r, s.perm.empty() ? j : s.perm[size_t(j)]);
      w.packed[size_t(r * (s.cols / 2) + j / 2)] |= uint8_t(j % 2 ? c << 4 : c);
    }
  w.scales.resize(s.scales.size());
  w.zeros.resize(s.zeros.size());
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      w.scales[size_t(r * groups + g)] = s.scales[size_t(g * s.rows + r)];
      w.zeros[size_t(r * groups + g)] = s.zeros[size_t(g * s.rows + r)];
    }
  return w;
}

std::vector<float> dequantize_int4(const Int4Weight& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  const int64_t groups = w.groups();
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t j = 0; j < w.cols; ++j) {
      const size_t g = size_t(r * groups + j / w.group_size);
      const int64_t col = w.perm.empty() ? j : w.perm[size_t(j)];
      out[size_t(r * w.cols + col)] = float(int(w.code(r, j)) - int(w.zeros[g])) * w.scales[g];
    }
  return out;
}

// The same values as dequantize_int4(unpack_int4(w)), rows spread over every core (the CPU
// backend loads a 7B model's projections through here).
std::vector<float> dequantize_int4(const Int4Stored& w) {
  std::vector<float> out(size_t(w.rows * w.cols));
  constexpr int64_t kRowsPerJob = 64;
  for_each_on_every_core(size_t((w.rows + kRowsPerJob - 1) / kRowsPerJob), [&](size_t job) {
    const int64_t end = std::min(w.rows, int64_t(job + 1) * kRowsPerJob);
    for (int64_t r = int64_t(job) * kRowsPerJob; r < end; ++r)
      for (int64_t j = 0; j < w.cols; ++j) {
        const size_t g = size_t((j / w.group_size) * w.rows + r);
        const int64_t col = w.perm.empty() ? j : w.perm[size_t(j)];
        out[size_t(r * w.cols + col)] = float(int(w.code(r, col)) - int(w.zeros[g])) * w.scales[g];
      }
  });
  return out;
}

bool int4_stackable(const std::vector<const Int4Stored*>& parts) {
  for (const Int4Stored* p : parts)
    if (!p || p->cols != parts[0]->cols || p->group_size != parts[0]->group_size ||
        p->perm != parts[0]->perm)
      return false;
  return !parts.empty();
}

Int4Stored stack_int4(const std::vector<const Int4Stored*>& parts) {
  FS_CHECK(int4_stackable(parts), "int4 weights of different columns, groups or act-order "
           "permutations cannot be stacked");
  Int4Stored s;
  s.cols = parts[0]->cols;
  s.group_size = parts[0]->group_size;
  s.perm = parts[0]->perm;
  auto words = std::make_shared<std::vector<uint8_t>>();
  for (const Int4Stored* p : parts) {
    s.rows += p->rows;
    const auto part = row_words(*p, {});
    words->insert(words->end(), part->begin(), part->end());
  }
  s.words = words->data();
  s.owned = std::move(words);
  for (int64_t g = 0; g < s.groups(); ++g)  // [groups, rows]: each group's rows part by part
    for (const Int4Stored* p : parts) {
      const size_t at = size_t(g * p->rows);
      s.scales.insert(s.scales.end(), p->scales.begin() + at, p->scales.begin() + at + p->rows);
      s.zeros.insert(s.zeros.end(), p->zeros.begin() + at, p->zeros.begin() + at + p->rows);
    }
  return s;
}

Int4Stored rewrite_int4_rows(const Int4Stored& w, const std::vector<int>& order,
                             const std::vector<float>& factor) {
  FS_CHECK(order.empty() || int64_t(order.size()) == w.rows, "rewrite_int4_rows: order of ",
           order.size(), " for ", w.rows, " rows");
  FS_CHECK(factor.empty() || int64_t(factor.size()) == w.rows, "rewrite_int4_rows: factors of ",
           factor.size(), " for ", w.rows, " rows");
  Int4Stored out = w;
  out.packing = Int4Packing::kRows;
  out.owned = row_words(w, order);
  out.words = out.owned->data();
  for (int64_t g = 0; g < w.groups(); ++g)
    for (int64_t r = 0; r < w.rows; ++r) {
      const size_t s = size_t(g * w.rows + (order.empty() ? r : order[size_t(r)]));
      out.zeros[size_t(g * w.rows + r)] = w.zeros[s];
      out.scales[size_t(g * w.rows + r)] = w.scales[s] * (factor.empty() ? 1.f : factor[size_t(r)]);
    }
  return out;
}

Int4Stored read_int4_stored(const QuantConfig& q, const Int4Source& src, int64_t rows,
                            int64_t cols) {
  const char* format = q.format == QuantFormat::kGptq  ? "GPTQ"
                       : q.format == QuantFormat::kAwq ? "AWQ gemm"
                                                       : "compressed-tensors pack-quantized";
  const Reader rd(src, format);
  FS_CHECK(q.is_int4(), "read_int4 on a config that is not int4");
  const int64_t gs = q.group_size == -1 ? cols : q.group_size;
  // Packing eight codes to an int32 along the input (and, for GPTQ and AWQ, along the output).
  const bool rows_packed = q.format != QuantFormat::kPackedInt4;
  if (cols % 8 != 0 || cols % gs != 0 || (rows_packed && rows % 8 != 0))
    rd.fail("'" + src.module + "' [" + std::to_string(rows) + ", " + std::to_string(cols) +
            "] cannot be stored as " + format + " with group_size " + std::to_string(q.group_size) +
            " (input columns must divide by 8 and by the group size" +
            (rows_packed ? ", output rows by 8)" : ")"));
  Int4Stored w;
  w.rows = rows, w.cols = cols, w.group_size = gs;
  const std::vector<int32_t> g_idx = rows_packed ? read_gptq_awq(w, q, rd) : read_packed(w, q, rd);
  w.perm = column_order(g_idx, cols, gs, rd);
  return w;
}

Int4Weight read_int4(const QuantConfig& q, const Int4Source& src, int64_t rows, int64_t cols) {
  return unpack_int4(read_int4_stored(q, src, rows, cols));
}

}  // namespace flashserve
