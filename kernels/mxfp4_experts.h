// gpt-oss's experts as every backend holds them (Backend::load_mxfp4_experts) and the MXFP4
// kernels read them (kernels/cpu/mxfp4_ref.h, kernels/mxfp4.h): each expert's gate_up
// [2 inter, hidden] (rows interleaved: gate, up, gate, ...) and down [hidden, inter] in MXFP4
// (core/fp4.h), stacked over the experts in the backend's memory, with f32 biases, and the
// clamped SwiGLU's constants. C++17-clean, no CUDA.
#pragma once

#include <cstdint>

namespace flashserve {

struct Mxfp4Experts {
  const uint8_t* gate_up_blocks = nullptr;  // [E, 2 inter, hidden / 2]
  const uint8_t* gate_up_scales = nullptr;  // [E, 2 inter, hidden / 32]
  const float* gate_up_bias = nullptr;      // [E, 2 inter]
  const uint8_t* down_blocks = nullptr;     // [E, hidden, inter / 2]
  const uint8_t* down_scales = nullptr;     // [E, hidden, inter / 32]
  const float* down_bias = nullptr;         // [E, hidden]
  int num_experts = 0;
  int64_t hidden = 0, inter = 0;
  float limit = 7.f, alpha = 1.702f;  // swiglu_limit, swiglu_alpha
};

}  // namespace flashserve
