// MXFP4 expert weights read at load (weights/mxfp4_weights.h): shapes and dtypes checked against
// the config, the scales scanned for NaN, the bytes left in the mapped file.
#include "weights/mxfp4_weights.h"

#include <algorithm>
#include <tuple>

#include "core/error.h"
#include "core/fp4.h"
#include "weights/every_core.h"

namespace flashserve {

Mxfp4Weight read_mxfp4(const SafetensorsEntry& blocks, const SafetensorsEntry& scales,
                       const std::string& name, int64_t experts, int64_t rows, int64_t cols,
                       const std::string& path) {
  if (cols % kMxfp4Block != 0)
    FS_THROW(path, ": tensor '", name, "_blocks': MXFP4 needs columns in blocks of 32, the config "
             "gives ", cols);
  const int64_t groups = cols / kMxfp4Block;
  const std::vector<int64_t> want_blocks = {experts, rows, groups, 16}, want_scales = {experts, rows, groups};
  for (const auto& [e, suffix, want] : {std::tuple{&blocks, "_blocks", &want_blocks},
                                        std::tuple{&scales, "_scales", &want_scales}}) {
    if (e->dtype != "U8")
      FS_THROW(path, ": tensor '", name, suffix, "' has dtype ", e->dtype, "; MXFP4 ", suffix + 1,
               " are U8");
    if (e->shape != *want)
      FS_THROW(path, ": tensor '", name, suffix, "' has shape ", shape_str(e->shape),
               " but the config needs ", shape_str(*want), " (num_local_experts, rows, columns / 32",
               suffix == std::string("_blocks") ? ", 16)" : ")");
  }
  // A NaN scale makes its 32 weights NaN: refused here rather than found in the logits.
  const int64_t n = experts * rows * groups;
  const size_t pieces = size_t(std::min<int64_t>(64, n));
  std::vector<int64_t> nan_at(pieces, -1);
  for_each_on_every_core(pieces, [&](size_t p) {
    for (int64_t i = n * int64_t(p) / int64_t(pieces); i < n * int64_t(p + 1) / int64_t(pieces); ++i)
      if (scales.data[i] == kE8m0Nan) {
        nan_at[p] = i;
        return;
      }
  });
  for (int64_t at : nan_at)
    if (at >= 0)
      FS_THROW(path, ": tensor '", name, "_scales' holds the NaN scale 255 (expert ",
               at / (rows * groups), ", row ", at / groups % rows, ")");
  Mxfp4Weight w;
  w.experts = experts, w.rows = rows, w.cols = cols;
  w.blocks = blocks.data;
  w.scales = scales.data;
  return w;
}

std::vector<float> dequantize_mxfp4(const Mxfp4Weight& w) {
  std::vector<float> out(size_t(w.experts * w.rows * w.cols));
  const int64_t all_rows = w.experts * w.rows;
  for_each_on_every_core(size_t(all_rows), [&](size_t r) {
    const uint8_t* b = w.blocks + int64_t(r) * (w.cols / 2);
    const uint8_t* s = w.scales + int64_t(r) * (w.cols / kMxfp4Block);
    float* o = out.data() + int64_t(r) * w.cols;
    for (int64_t c = 0; c < w.cols; c += 2) {
      const float scale = e8m0_to_float(s[c / kMxfp4Block]);
      o[c] = e2m1_to_float(b[c / 2] & 0xf) * scale;
      o[c + 1] = e2m1_to_float(b[c / 2] >> 4) * scale;
    }
  });
  return out;
}

}  // namespace flashserve
