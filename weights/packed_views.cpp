// Packed weight views' values on demand (weights/packed_views.h).
#include "weights/packed_views.h"

#include "core/error.h"
#include "weights/block_fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/mxfp4_weights.h"

namespace flashserve {

bool is_packed(const TensorView& w) {
  return w.int4 != nullptr || w.block_fp8 != nullptr || w.mxfp4 != nullptr;
}

TensorView unpacked_view(const TensorView& w, std::vector<float>* storage) {
  if (!is_packed(w)) return w;
  if (w.mxfp4) {  // [experts, rows, cols]
    const Mxfp4Weight& m = *w.mxfp4;
    FS_CHECK(w.shape == std::vector<int64_t>({m.experts, m.rows, m.cols}),
             "an MXFP4 weight's view and packed form disagree on its shape");
    *storage = dequantize_mxfp4(m);
    TensorView out;
    out.shape = w.shape;
    out.data = storage->data();
    return out;
  }
  const int64_t rows = w.int4 ? w.int4->rows : w.block_fp8->rows;
  const int64_t cols = w.int4 ? w.int4->cols : w.block_fp8->cols;
  FS_CHECK(w.shape.size() == 2 && w.shape[0] == rows && w.shape[1] == cols,
           "a packed weight's view and packed form disagree on its shape");
  *storage = w.int4 ? dequantize_int4(*w.int4) : dequantize_block_fp8(*w.block_fp8);
  TensorView out;
  out.dtype = DType::kF32;
  out.shape = w.shape;
  out.data = storage->data();
  return out;
}

}  // namespace flashserve
