// CPU twin of the GPU argmax: one scan per row.
#include "kernels/cpu/argmax_ref.h"

#include <cmath>

namespace flashserve::ref {

void argmax_rows(int32_t* ids, const float* logits, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * cols;
    int32_t best = 0;
    bool nan = false;
    for (int64_t c = 0; c < cols; ++c) {
      nan |= std::isnan(row[c]);
      if (row[c] > row[best]) best = int32_t(c);  // ties keep the lowest id
    }
    ids[r] = nan ? -1 : best;
  }
}

}  // namespace flashserve::ref
