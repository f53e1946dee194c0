// Backend::load_stacked_weight's default (backends/backend.h): the parts' host concatenation,
// loaded as one weight (packed int4 parts as one packed weight; block-wise FP8 parts as their
// f32 values, which is what a backend without block-FP8 kernels runs). Checks that the parts
// can be stacked.
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "weights/int4_weights.h"
#include "weights/packed_views.h"

namespace flashserve {

TensorView stacked_view(std::span<const TensorView> parts) {
  FS_CHECK(!parts.empty(), "load_stacked_weight: no parts");
  const TensorView& first = parts[0];
  TensorView stacked;
  stacked.dtype = first.dtype;
  stacked.to_fp8 = first.to_fp8;  // rows quantize alone: the stack's FP8 is its parts' stacked
  int64_t rows = 0;
  for (const TensorView& t : parts) {
    // Matrices [rows, k] with one k, or vectors [rows] (the projections' biases).
    const bool same_rows =
        t.shape.size() == first.shape.size() &&
        (t.shape.size() == 1 || (t.shape.size() == 2 && t.shape[1] == first.shape[1]));
    FS_CHECK(same_rows && t.dtype == first.dtype && !t.row_scale == !first.row_scale &&
                 t.to_fp8 == first.to_fp8,
             "cannot stack weights of shapes ", shape_str(first.shape), " and ",
             shape_str(t.shape), " (the shape, dtype or scales differ)");
    rows += t.shape[0];
  }
  stacked.shape = {rows};
  if (first.shape.size() == 2) stacked.shape.push_back(first.shape[1]);
  return stacked;
}

TensorView stacked_on_host(std::span<const TensorView> parts, std::vector<char>* bytes,
                           std::vector<float>* row_scales) {
  TensorView stacked = stacked_view(parts);
  if (stacked.dtype == DType::kI4) {  // packed int4 parts
    std::vector<const Int4Stored*> int4;
    for (const TensorView& t : parts) int4.push_back(t.int4.get());
    if (int4_stackable(int4)) {
      stacked.int4 = std::make_shared<const Int4Stored>(stack_int4(int4));
      return stacked;
    }
    stacked.dtype = DType::kF32;  // the others: their f32 values, part after part
    bytes->clear();
    for (const Int4Stored* p : int4) {
      const std::vector<float> v = dequantize_int4(*p);
      bytes->insert(bytes->end(), reinterpret_cast<const char*>(v.data()),
                    reinterpret_cast<const char*>(v.data() + v.size()));
    }
    stacked.data = bytes->data();
    return stacked;
  }
  if (parts[0].block_fp8) {  // block-wise FP8 (a backend that runs it packed stacks it itself)
    bytes->resize(size_t(stacked.numel()) * 4);  // dtype kF32, that of every part's values
    char* at = bytes->data();
    for (const TensorView& t : parts) {
      std::vector<float> values;
      const TensorView v = unpacked_view(t, &values);
      std::memcpy(at, v.data, size_t(v.numel()) * 4);
      at += size_t(v.numel()) * 4;
    }
    stacked.data = bytes->data();
    return stacked;
  }
  bytes->resize(size_t(stacked.numel()) * dtype_size(stacked.dtype));
  row_scales->clear();
  size_t at = 0;
  for (const TensorView& t : parts) {
    const size_t n = size_t(t.numel()) * dtype_size(t.dtype);
    std::memcpy(bytes->data() + at, t.data, n);
    at += n;
    if (t.row_scale) row_scales->insert(row_scales->end(), t.row_scale, t.row_scale + t.shape[0]);
  }
  stacked.data = bytes->data();
  if (!row_scales->empty()) stacked.row_scale = row_scales->data();
  return stacked;
}

Buffer Backend::load_stacked_weight(std::span<const TensorView> parts) {
  std::vector<char> bytes;
  std::vector<float> row_scales;
  return load_weight(stacked_on_host(parts, &bytes, &row_scales));
}

}  // namespace flashserve

namespace flashserve {

std::shared_ptr<MoeExperts> Backend::load_moe_experts(std::span<const TensorView> gate,
                                                      std::span<const TensorView> up,
                                                      std::span<const TensorView> down) {
  FS_CHECK(!gate.empty() && gate.size() == up.size() && gate.size() == down.size(),
           "MoE experts: ", gate.size(), " gate, ", up.size(), " up and ", down.size(),
           " down projections");
  auto e = std::make_shared<MoeExperts>();
  e->num_experts = int(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    const TensorView parts[2] = {gate[i], up[i]};
    Buffer gu = load_stacked_weight(parts);
    Buffer dn = load_weight(down[i]);
    e->gate_up.push_back(gu.tensor);
    e->down.push_back(dn.tensor);
    e->storage.push_back(std::move(gu));
    e->storage.push_back(std::move(dn));
  }
  e->intermediate = int(e->gate_up[0].dim(0) / 2);
  e->hidden = int(e->gate_up[0].ndim > 1 ? e->gate_up[0].dim(1) : 0);
  return e;
}

}  // namespace flashserve
