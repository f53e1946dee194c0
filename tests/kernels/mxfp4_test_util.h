// Random MXFP4 weights for the kernel tests (the format: core/fp4.h): every E2M1 code, scales
// spread over 2^(lo - 127) .. 2^(hi - 127) (by default 2^-12 .. 2^4) with the edge scale 0
// (2^-127, subnormal) in a few blocks, biases uniform in [-0.5, 0.5].
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/mxfp4_ref.h"

namespace flashserve::test {

struct Mxfp4Host {
  std::vector<uint8_t> blocks, scales;  // [groups, rows, cols / 2], [groups, rows, cols / 32]
  std::vector<float> bias;              // [groups, rows]
  int groups = 1, rows = 0, cols = 0;
  ref::Mxfp4Ref group(int g) const {
    return {blocks.data() + size_t(g) * rows * (cols / 2),
            scales.data() + size_t(g) * rows * (cols / 32), rows, cols};
  }
};

inline Mxfp4Host random_mxfp4(int groups, int rows, int cols, std::mt19937& rng, int lo = 115,
                              int hi = 131) {
  Mxfp4Host w;
  w.groups = groups, w.rows = rows, w.cols = cols;
  w.blocks.resize(size_t(groups) * rows * cols / 2);
  w.scales.resize(size_t(groups) * rows * cols / 32);
  w.bias.resize(size_t(groups) * rows);
  for (uint8_t& b : w.blocks) b = uint8_t(rng());
  for (size_t i = 0; i < w.scales.size(); ++i)
    w.scales[i] = i % 97 == 5 ? 0 : uint8_t(lo + int(rng() % unsigned(hi - lo + 1)));
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (float& b : w.bias) b = u(rng);
  return w;
}

}  // namespace flashserve::test
