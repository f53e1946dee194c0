// FP8 weights: quantizing at load and reading Hugging Face's weight_scale tensors (fp8_weights.h).
#include "weights/fp8_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp8.h"

namespace flashserve {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool is_fp8_projection(const std::string& name) {
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (const char* p : {".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
                        ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
                        ".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight"})
    if (ends_with(name, p)) return true;
  return false;
}

std::string fp8_scale_name(const std::string& weight_name) { return weight_name + "_scale"; }

std::vector<float> weight_values(const TensorView& w) {
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
      FS_THROW("weights of dtype ", dtype_name(w.dtype), " are not supported");
  }
  return out;
}

Fp8Rows quantize_fp8_rows(const TensorView& w, const std::string& name, bool per_tensor) {
  FS_CHECK(w.shape.size() == 2 && w.dtype != DType::kF8E4M3 && w.dtype != DType::kI32,
           "cannot quantize ", name, " (", dtype_name(w.dtype), ", ", w.shape.size(), "-d)");
  const int64_t rows = w.shape[0], cols = w.shape[1];
  const std::vector<float> v = weight_values(w);
  auto scale_of = [](float amax) { return amax > 0.f ? amax / kFp8E4M3Max : 1.f; };
  Fp8Rows out;
  out.q.resize(v.size());
  out.scale.resize(size_t(rows));
  float tensor_amax = 0.f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = v.data() + r * cols;
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) {
      FS_CHECK(std::isfinite(row[c]), "cannot quantize ", name, ": row ", r, " holds ", row[c]);
      amax = std::max(amax, std::fabs(row[c]));
    }
    out.scale[size_t(r)] = scale_of(amax);
    tensor_amax = std::max(tensor_amax, amax);
  }
  if (per_tensor) out.scale.assign(size_t(rows), scale_of(tensor_amax));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out.q[size_t(r * cols + c)] = float_to_fp8_e4m3(v[size_t(r * cols + c)] / out.scale[size_t(r)]);
  return out;
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
  for (float s : values)
    if (!std::isfinite(s) || s < 0.f)
      FS_THROW(path, ": tensor '", name, "' holds ", s, "; scales must be finite and >= 0");
  if (per_tensor) values.assign(size_t(rows), values[0]);
  return values;
}

}  // namespace flashserve
