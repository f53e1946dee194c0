// Backend::load_mxfp4_experts's default (backends/backend.h): gpt-oss's MXFP4 experts copied to
// the device as the checkpoint packs them, their biases as f32. Every backend's kernels read this
// layout (kernels/cpu/mxfp4_ref.h, kernels/mxfp4.h).
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "weights/mxfp4_weights.h"

namespace flashserve {

namespace {

// `bytes` bytes of host memory in a new device allocation (as one-byte elements).
std::shared_ptr<void> upload_bytes(Backend& b, const void* src, size_t bytes) {
  std::shared_ptr<void> mem = b.allocate_bytes(bytes);
  b.copy_from_host(Tensor(mem.get(), DType::kF8E4M3, b.device(), {int64_t(bytes)}), src);
  return mem;
}

// A bias [experts, rows] of any float dtype as f32 on the device.
std::shared_ptr<void> upload_bias(Backend& b, const TensorView& bias, int64_t experts,
                                  int64_t rows, const char* what) {
  FS_CHECK(bias.shape == std::vector<int64_t>({experts, rows}) && bias.data,
           "MXFP4 experts: ", what, " bias of shape ", shape_str(bias.shape), ", not [", experts,
           ", ", rows, "]");
  std::vector<float> v(size_t(experts * rows));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (bias.dtype) {
      case DType::kF32: v[i] = static_cast<const float*>(bias.data)[i]; break;
      case DType::kBF16: v[i] = bf16_bits_to_float(static_cast<const uint16_t*>(bias.data)[i]); break;
      case DType::kF16: v[i] = f16_bits_to_float(static_cast<const uint16_t*>(bias.data)[i]); break;
      default: FS_THROW("MXFP4 experts: a ", what, " bias of dtype ", dtype_name(bias.dtype));
    }
  }
  return upload_bytes(b, v.data(), v.size() * sizeof(float));
}

}  // namespace

std::shared_ptr<MoeExperts> Backend::load_mxfp4_experts(const TensorView& gate_up,
                                                        const TensorView& gate_up_bias,
                                                        const TensorView& down,
                                                        const TensorView& down_bias,
                                                        float swiglu_limit, float swiglu_alpha) {
  FS_CHECK(gate_up.mxfp4 && down.mxfp4, "MXFP4 experts: the projections are not MXFP4");
  const Mxfp4Weight& gu = *gate_up.mxfp4;
  const Mxfp4Weight& dn = *down.mxfp4;
  FS_CHECK(gu.experts == dn.experts && gu.rows % 2 == 0 && dn.rows == gu.cols &&
               dn.cols == gu.rows / 2 && gu.cols % 32 == 0 && dn.cols % 32 == 0,
           "MXFP4 experts: gate_up [", gu.experts, ", ", gu.rows, ", ", gu.cols, "] and down [",
           dn.experts, ", ", dn.rows, ", ", dn.cols, "] do not fit together");
  auto e = std::make_shared<MoeExperts>();
  e->num_experts = int(gu.experts);
  e->hidden = int(gu.cols);
  e->intermediate = int(dn.cols);
  const size_t gu_values = size_t(gu.experts * gu.rows * gu.cols);
  const size_t dn_values = size_t(dn.experts * dn.rows * dn.cols);
  // Each upload is kept by the experts; the layout points into them.
  auto bytes = [&](const uint8_t* src, size_t n) {
    e->mxfp4_storage.push_back(upload_bytes(*this, src, n));
    return static_cast<const uint8_t*>(e->mxfp4_storage.back().get());
  };
  auto bias = [&](const TensorView& b, const Mxfp4Weight& w, const char* what) {
    e->mxfp4_storage.push_back(upload_bias(*this, b, w.experts, w.rows, what));
    return static_cast<const float*>(e->mxfp4_storage.back().get());
  };
  Mxfp4Experts m;
  m.gate_up_blocks = bytes(gu.blocks, gu_values / 2);
  m.gate_up_scales = bytes(gu.scales, gu_values / 32);
  m.down_blocks = bytes(dn.blocks, dn_values / 2);
  m.down_scales = bytes(dn.scales, dn_values / 32);
  m.gate_up_bias = bias(gate_up_bias, gu, "gate_up");
  m.down_bias = bias(down_bias, dn, "down");
  m.num_experts = e->num_experts;
  m.hidden = e->hidden;
  m.inter = e->intermediate;
  m.limit = swiglu_limit;
  m.alpha = swiglu_alpha;
  e->mxfp4 = m;
  return e;
}

}  // namespace flashserve
