// rewrite_rows: row reordering and per-row scaling of a weight on the host (model/weight_rows.h).
#include "model/weight_rows.h"

#include <cstring>

#include "core/error.h"
#include "weights/fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/packed_views.h"

namespace flashserve {

TensorView rewrite_rows(const TensorView& w, const std::vector<int>& order,
                        const std::vector<float>& factor, HostRows* out) {
  FS_CHECK(!w.shape.empty() && w.shape[0] > 0, "rewrite_rows: a weight without rows");
  if (w.int4) {  // packed int4 (no values): its rows move and their scales scale, still packed
    TensorView t = w;
    t.int4 = std::make_shared<const Int4Stored>(rewrite_int4_rows(*w.int4, order, factor));
    return t;
  }
  if (w.to_fp8) {  // --quantize fp8: quantized first, so the factors scale the rows' FP8 scales
    Fp8Rows fp8;     // read before the return: the codes and scales are copied into *out
    return rewrite_rows(fp8_view_on_host(w, &fp8), order, factor, out);
  }
  if (w.block_fp8) {  // packed block-wise FP8: moved or scaled rows leave their blocks
    std::vector<float> values;  // read before the return: the rows are copied into *out
    return rewrite_rows(unpacked_view(w, &values), order, factor, out);
  }
  FS_CHECK(w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16 ||
               w.dtype == DType::kF8E4M3,
           "rows of a ", dtype_name(w.dtype), " weight cannot be reordered or scaled at load");
  const int64_t rows = w.shape[0], cols = w.numel() / rows;
  FS_CHECK(order.empty() || int64_t(order.size()) == rows, "rewrite_rows: order of ", order.size());
  FS_CHECK(factor.empty() || int64_t(factor.size()) == rows, "rewrite_rows: factors of ",
           factor.size());
  const bool fp8 = w.dtype == DType::kF8E4M3;
  const bool to_f32 = !factor.empty() && !fp8;
  std::vector<float> values;
  if (to_f32) values = weight_values(w);
  const char* src = to_f32 ? reinterpret_cast<const char*>(values.data())
                           : static_cast<const char*>(w.data);
  const DType dtype = to_f32 ? DType::kF32 : w.dtype;
  const size_t row_bytes = size_t(cols) * dtype_size(dtype);
  out->bytes.resize(size_t(rows) * row_bytes);
  if (fp8) out->row_scale.resize(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t s = order.empty() ? r : order[size_t(r)];
    FS_CHECK(s >= 0 && s < rows, "rewrite_rows: bad source row ", s);
    std::memcpy(out->bytes.data() + size_t(r) * row_bytes, src + size_t(s) * row_bytes, row_bytes);
    const float f = factor.empty() ? 1.f : factor[size_t(r)];
    if (fp8) out->row_scale[size_t(r)] = w.row_scale[s] * f;
    if (to_f32) {
      float* row = reinterpret_cast<float*>(out->bytes.data() + size_t(r) * row_bytes);
      for (int64_t k = 0; k < cols; ++k) row[k] *= f;
    }
  }
  TensorView t = w;
  t.dtype = dtype;
  t.data = out->bytes.data();
  t.row_scale = fp8 ? out->row_scale.data() : nullptr;
  return t;
}

}  // namespace flashserve
