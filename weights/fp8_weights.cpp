// FP8 weights: quantizing at load and reading Hugging Face's weight_scale tensors (fp8_weights.h).
#include "weights/fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "weights/llama_tensors.h"
#include "core/fp8.h"
#include "weights/packed_views.h"

namespace flashserve {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Row r of a 2-d f32/f16/bf16 weight as f32.
void row_values(const TensorView& w, int64_t r, float* out) {  // out: [w.shape[1]]
  const int64_t cols = w.shape[1];
  if (w.dtype == DType::kF32) {
    std::memcpy(out, static_cast<const float*>(w.data) + r * cols, size_t(cols) * 4);
    return;
  }
  const uint16_t* in = static_cast<const uint16_t*>(w.data) + r * cols;
  if (w.dtype == DType::kF16)
    for (int64_t c = 0; c < cols; ++c) out[c] = f16_bits_to_float(in[c]);
  else
    for (int64_t c = 0; c < cols; ++c) out[c] = bf16_bits_to_float(in[c]);
}

}  // namespace

bool is_fp8_projection(const std::string& name) {
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (const char* p : {".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
                        ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
                        ".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight"})
    if (ends_with(name, p)) return true;
  return moe_tensor(name).role != MoeRole::kNone;  // experts' projections; never the router
}

std::string fp8_scale_name(const std::string& weight_name) { return weight_name + "_scale"; }

std::vector<float> weight_values(const TensorView& w) {
  if (w.to_fp8) {
    Fp8Rows fp8;
    return weight_values(fp8_view_on_host(w, &fp8));
  }
  if (is_packed(w)) {  // int4 or block-wise FP8: dequantized
    std::vector<float> values;
    unpacked_view(w, &values);
    return values;
  }
  const int64_t n = w.numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (w.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), w.data, size_t(n) * 4);
      break;
    case DType::kF16:
    case DType::kBF16: {
      const uint16_t* in = static_cast<const uint16_t*>(w.data);
      for (int64_t i = 0; i < n; ++i)
        out[size_t(i)] = w.dtype == DType::kF16 ? f16_bits_to_float(in[i]) : bf16_bits_to_float(in[i]);
      break;
    }
    case DType::kF8E4M3: {
      FS_CHECK(w.row_scale && !w.shape.empty(), "an FP8 weight without row scales");
      const uint8_t* in = static_cast<const uint8_t*>(w.data);
      const int64_t cols = w.shape[0] > 0 ? n / w.shape[0] : 0;
      for (int64_t i = 0; i < n; ++i)
        out[size_t(i)] = fp8_e4m3_to_float(in[i]) * w.row_scale[i / cols];
      break;
    }
    case DType::kI32:
    case DType::kI4:
      FS_THROW("weights of dtype ", dtype_name(w.dtype), " are not supported");
  }
  return out;
}

Fp8Rows quantize_fp8_rows(const TensorView& w, const std::string& name, bool per_tensor) {
  FS_CHECK(w.shape.size() == 2 && (w.dtype == DType::kF32 || w.dtype == DType::kF16 ||
                                    w.dtype == DType::kBF16),
           "cannot quantize ", name, " (", dtype_name(w.dtype), ", ", w.shape.size(), "-d)");
  const int64_t rows = w.shape[0], cols = w.shape[1];
  auto scale_of = [](float amax) { return amax > 0.f ? amax / kFp8E4M3Max : 1.f; };
  Fp8Rows out;
  out.q.resize(size_t(rows * cols));
  out.scale.resize(size_t(rows));
  // Row by row through one row of f32: the tensor is read twice and the codes written once,
  // with no tensor-sized f32 copy (that copy's page faults and traffic made a 7B model's
  // quantization several times slower).
  std::vector<float> values(static_cast<size_t>(cols));
  float tensor_amax = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    row_values(w, r, values.data());
    float amax = 0.f;
    bool finite = true;
    for (int64_t c = 0; c < cols; ++c) {
      finite &= std::isfinite(values[size_t(c)]);
      amax = std::max(amax, std::fabs(values[size_t(c)]));
    }
    if (!finite)
      for (int64_t c = 0; c < cols; ++c)
        FS_CHECK(std::isfinite(values[size_t(c)]), "cannot quantize ", name, ": row ", r, " holds ",
                 values[size_t(c)]);
    out.scale[size_t(r)] = scale_of(amax);
    tensor_amax = std::max(tensor_amax, amax);
  }
  if (per_tensor) out.scale.assign(size_t(rows), scale_of(tensor_amax));
  for (int64_t r = 0; r < rows; ++r) {
    row_values(w, r, values.data());
    const float scale = out.scale[size_t(r)];
    uint8_t* q = out.q.data() + size_t(r * cols);
    for (int64_t c = 0; c < cols; ++c) q[c] = float_to_fp8_e4m3(values[size_t(c)] / scale);
  }
  return out;
}

TensorView fp8_view_on_host(const TensorView& w, Fp8Rows* storage) {
  if (!w.to_fp8) return w;
  *storage = quantize_fp8_rows(w, "a projection of shape " + shape_str(w.shape));
  TensorView t = w;
  t.dtype = DType::kF8E4M3;
  t.data = storage->q.data();
  t.row_scale = storage->scale.data();
  t.to_fp8 = false;
  return t;
}

std::vector<float> fp8_row_scales(const SafetensorsEntry& e, const std::string& weight_name,
                                  int64_t rows, const std::string& path) {
  const std::string name = fp8_scale_name(weight_name);
  int64_t numel = 1;
  for (int64_t d : e.shape) numel *= d;
  const bool per_tensor = numel == 1 && e.shape.size() <= 1;
  const bool per_row = (e.shape == std::vector<int64_t>{rows} ||
                                     e.shape == std::vector<int64_t>{rows, 1});
  if (!per_tensor && !per_row)
    FS_THROW(path, ": tensor '", name, "' has shape ", shape_str(e.shape), "; an FP8 scale is "
             "[] or [1] (per tensor) or [", rows, ", 1] / [", rows, "] (per output channel)");
  std::vector<float> values(static_cast<size_t>(numel));
  if (e.dtype == "F32") {
    std::memcpy(values.data(), e.data, size_t(numel) * 4);
  } else if (e.dtype == "BF16" || e.dtype == "F16") {
    for (int64_t i = 0; i < numel; ++i) {
      uint16_t h;
      std::memcpy(&h, e.data + 2 * i, 2);
      values[size_t(i)] = e.dtype == "F16" ? f16_bits_to_float(h) : bf16_bits_to_float(h);
    }
  } else {
    FS_THROW(path, ": tensor '", name, "' has dtype ", e.dtype, "; FP8 scales are F32, BF16 or F16");
  }
  for (float s : values)  // E4M3 codes reach 448: a larger scale past FLT_MAX / 448 overflows
    if (!std::isfinite(448.f * s) || s < 0.f)
      FS_THROW(path, ": tensor '", name, "' holds ", s,
               "; scales must be finite, >= 0 and at most FLT_MAX / 448");
  if (per_tensor) values.assign(size_t(rows), values[0]);
  return values;
}

}  // namespace flashserve
