// Packed weight views' values on demand (weights/packed_views.h).
#include "weights/packed_views.h"

#include "core/error.h"
#include "weights/int4_weights.h"

namespace flashserve {

bool is_packed(const TensorView& w) { return w.int4 != nullptr; }

TensorView unpacked_view(const TensorView& w, std::vector<float>* storage) {
  if (!is_packed(w)) return w;
  FS_CHECK(w.shape.size() == 2 && w.shape[0] == w.int4->rows && w.shape[1] == w.int4->cols,
           "an int4 weight's view and packed form disagree on its shape");
  *storage = dequantize_int4(*w.int4);
  TensorView out;
  out.dtype = DType::kF32;
  out.shape = w.shape;
  out.data = storage->data();
  return out;
}

}  // namespace flashserve
