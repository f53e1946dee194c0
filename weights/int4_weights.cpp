// int4 checkpoints into the internal layout (int4_weights.h). Each format is first unpacked to
// one code per weight in input-column order with per-(row, group) scales and zero points and a
// group per input column (g_idx); pack() then orders the columns by group, once, and packs.
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

namespace flashserve {

namespace {

constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// One code per weight in input-column order, before pack().
struct Unpacked {
  std::vector<uint8_t> codes;  // [rows, cols]
  std::vector<float> scales;   // [rows, groups]
  std::vector<uint8_t> zeros;  // [rows, groups]
  std::vector<int32_t> g_idx;  // [cols]: the group of each input column
};

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
      if (!std::isfinite(out[i]) || out[i] < 0.f)
        FS_THROW(s_.path, ": tensor '", name(suffix), "' holds ", out[i],
                 "; scales must be finite and >= 0");
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

Unpacked unpack_gptq(const QuantConfig& q, const Reader& rd, int64_t rows, int64_t cols, int64_t gs) {
  const int64_t groups = cols / gs;
  const std::vector<int32_t> qw = rd.ints(*rd.get("qweight", {"I32"}, {cols / 8, rows}));
  const std::vector<int32_t> qz = rd.ints(*rd.get("qzeros", {"I32"}, {groups, rows / 8}));
  const std::vector<float> sc = rd.scales("scales", {groups, rows});
  Unpacked u;
  u.g_idx = rd.g_idx("g_idx", cols, gs, q.desc_act);
  u.codes.resize(size_t(rows * cols));
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t r = 0; r < rows; ++r)
      u.codes[size_t(r * cols + i)] = nibble(qw[size_t((i / 8) * rows + r)], int(i % 8));
  u.scales.resize(size_t(rows * groups));
  u.zeros.resize(size_t(rows * groups));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < rows; ++r) {
      u.scales[size_t(r * groups + g)] = sc[size_t(g * rows + r)];
      u.zeros[size_t(r * groups + g)] =
          uint8_t(nibble(qz[size_t(g * (rows / 8) + r / 8)], int(r % 8)) + q.gptq_zero_offset);
    }
  return u;
}

Unpacked unpack_awq(const Reader& rd, int64_t rows, int64_t cols, int64_t gs) {
  const int64_t groups = cols / gs;
  const std::vector<int32_t> qw = rd.ints(*rd.get("qweight", {"I32"}, {cols, rows / 8}));
  const std::vector<int32_t> qz = rd.ints(*rd.get("qzeros", {"I32"}, {groups, rows / 8}));
  const std::vector<float> sc = rd.scales("scales", {groups, rows});
  Unpacked u;
  u.g_idx = rd.g_idx("g_idx", cols, gs, false);  // AWQ has none: i / group_size
  u.codes.resize(size_t(rows * cols));
  for (int64_t i = 0; i < cols; ++i)
    for (int64_t r = 0; r < rows; ++r)
      u.codes[size_t(r * cols + i)] = nibble(qw[size_t(i * (rows / 8) + r / 8)], kAwqNibble[r % 8]);
  u.scales.resize(size_t(rows * groups));
  u.zeros.resize(size_t(rows * groups));
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < rows; ++r) {
      u.scales[size_t(r * groups + g)] = sc[size_t(g * rows + r)];
      u.zeros[size_t(r * groups + g)] = nibble(qz[size_t(g * (rows / 8) + r / 8)], kAwqNibble[r % 8]);
    }
  return u;
}

Unpacked unpack_packed(const QuantConfig& q, const Reader& rd, int64_t rows, int64_t cols, int64_t gs) {
  const int64_t groups = cols / gs;
  const SafetensorsEntry* shape = rd.get("weight_shape", {"I64", "I32"}, {2}, true);
  if (shape && rd.ints(*shape) != std::vector<int32_t>{int32_t(rows), int32_t(cols)})
    rd.fail("tensor '" + rd.name("weight_shape") + "' does not say [" + std::to_string(rows) +
            ", " + std::to_string(cols) + "], the projection's shape");
  const std::vector<int32_t> wp = rd.ints(*rd.get("weight_packed", {"I32"}, {rows, cols / 8}));
  Unpacked u;
  u.scales = rd.scales("weight_scale", {rows, groups});
  u.g_idx = rd.g_idx("weight_g_idx", cols, gs, q.desc_act);
  u.codes.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i)
      u.codes[size_t(r * cols + i)] = nibble(wp[size_t(r * (cols / 8) + i / 8)], int(i % 8));
  u.zeros.assign(size_t(rows * groups), 8);  // symmetric: signed zero 0, stored +8
  if (q.sym) return u;
  // Zero points packed along the rows (int32 [ceil(rows/8), groups]), or one int8 each.
  const SafetensorsEntry* stored = rd.s_.find("weight_zero_point");
  if (!stored || stored->dtype != "I8") {
    const std::vector<int32_t> z =
        rd.ints(*rd.get("weight_zero_point", {"I32"}, {(rows + 7) / 8, groups}));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < groups; ++g)
        u.zeros[size_t(r * groups + g)] = nibble(z[size_t((r / 8) * groups + g)], int(r % 8));
    return u;
  }
  const std::vector<int32_t> z = rd.ints(*rd.get("weight_zero_point", {"I8"}, {rows, groups}));
  for (size_t i = 0; i < z.size(); ++i) {
    if (z[i] < -8 || z[i] > 7)
      rd.fail("tensor '" + rd.name("weight_zero_point") + "' holds " + std::to_string(z[i]) +
              "; int4 zero points are -8..7");
    u.zeros[i] = uint8_t(z[i] + 8);
  }
  return u;
}

// Orders the columns by group (act-order: g_idx in any order; each group must hold group_size
// columns) and packs two codes a byte.
Int4Weight pack(Unpacked u, int64_t rows, int64_t cols, int64_t gs, const Reader& rd) {
  Int4Weight w;
  w.rows = rows, w.cols = cols, w.group_size = gs;
  std::vector<int32_t> order(static_cast<size_t>(cols));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return u.g_idx[size_t(a)] < u.g_idx[size_t(b)]; });
  bool identity = true;
  for (int64_t j = 0; j < cols; ++j) {
    if (u.g_idx[size_t(order[size_t(j)])] != j / gs)
      rd.fail("the g_idx of '" + rd.s_.module + "' does not give every group " +
              std::to_string(gs) + " columns (group " + std::to_string(j / gs) + ")");
    identity &= order[size_t(j)] == j;
  }
  if (!identity) w.perm = order;
  w.packed.assign(size_t(rows * cols / 2), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const uint8_t c = u.codes[size_t(r * cols + order[size_t(j)])];
      w.packed[size_t(r * (cols / 2) + j / 2)] |= uint8_t(j % 2 ? c << 4 : c);
    }
  w.scales = std::move(u.scales);
  w.zeros = std::move(u.zeros);
  return w;
}

}  // namespace

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

bool int4_stackable(const std::vector<const Int4Weight*>& parts) {
  for (const Int4Weight* p : parts)
    if (!p || p->cols != parts[0]->cols || p->group_size != parts[0]->group_size ||
        p->perm != parts[0]->perm)
      return false;
  return !parts.empty();
}

Int4Weight stack_int4(const std::vector<const Int4Weight*>& parts) {
  FS_CHECK(int4_stackable(parts), "int4 weights of different columns, groups or act-order "
           "permutations cannot be stacked");
  Int4Weight s;
  s.cols = parts[0]->cols;
  s.group_size = parts[0]->group_size;
  s.perm = parts[0]->perm;
  for (const Int4Weight* p : parts) {
    s.rows += p->rows;
    s.packed.insert(s.packed.end(), p->packed.begin(), p->packed.end());
    s.scales.insert(s.scales.end(), p->scales.begin(), p->scales.end());
    s.zeros.insert(s.zeros.end(), p->zeros.begin(), p->zeros.end());
  }
  return s;
}

Int4Weight rewrite_int4_rows(const Int4Weight& w, const std::vector<int>& order,
                             const std::vector<float>& factor) {
  FS_CHECK(order.empty() || int64_t(order.size()) == w.rows, "rewrite_int4_rows: order of ",
           order.size(), " for ", w.rows, " rows");
  FS_CHECK(factor.empty() || int64_t(factor.size()) == w.rows, "rewrite_int4_rows: factors of ",
           factor.size(), " for ", w.rows, " rows");
  Int4Weight out = w;
  const size_t row_bytes = size_t(w.cols / 2), groups = size_t(w.groups());
  for (int64_t r = 0; r < w.rows; ++r) {
    const int64_t s = order.empty() ? r : order[size_t(r)];
    FS_CHECK(s >= 0 && s < w.rows, "rewrite_int4_rows: bad source row ", s);
    std::copy_n(w.packed.begin() + s * row_bytes, row_bytes, out.packed.begin() + r * row_bytes);
    std::copy_n(w.zeros.begin() + s * groups, groups, out.zeros.begin() + r * groups);
    const float f = factor.empty() ? 1.f : factor[size_t(r)];
    for (size_t g = 0; g < groups; ++g) out.scales[r * groups + g] = w.scales[s * groups + g] * f;
  }
  return out;
}

Int4Weight read_int4(const QuantConfig& q, const Int4Source& src, int64_t rows, int64_t cols) {
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
  Unpacked u = q.format == QuantFormat::kGptq  ? unpack_gptq(q, rd, rows, cols, gs)
               : q.format == QuantFormat::kAwq ? unpack_awq(rd, rows, cols, gs)
                                               : unpack_packed(q, rd, rows, cols, gs);
  return pack(std::move(u), rows, cols, gs, rd);
}

}  // namespace flashserve
