// --quantize fp8 on the GPU: cuda::quantize_weight_fp8 (kernels/fp8_quantize.h) against its host
// twin quantize_fp8_rows (weights/fp8_weights.h), byte for byte, codes and scales, on bf16 and f16
// weights: random bit patterns (every exponent, subnormals, the largest values), rows not centred
// on zero at magnitudes from 2^-120 to 2^100, rows of zeros and of signed zeros, rows whose huge
// amax sends the rest under the smallest code, cols of 1, odd and not a multiple of 8. Outputs
// are poisoned first. Non-finite rows: the smallest one is reported and nothing else is written
// wrong. Then the CUDA backend: views marked to_fp8 (one, and stacked as q/k/v) load to the same
// device bytes as the host-quantized FP8 views, and a NaN is a load error naming its row.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/fp8_quantize.h"
#include "tests/kernels/device_test_util.h"
#include "weights/fp8_weights.h"

namespace flashserve {
namespace {

using test::Dev;

// Random 16-bit patterns of `dtype` (bf16 or f16) that are finite: every sign, exponent and
// mantissa, subnormals and the largest values included.
uint16_t random_finite(DType dtype, std::mt19937& rng) {
  const uint16_t exp_mask = dtype == DType::kBF16 ? 0x7f80 : 0x7c00;
  for (;;) {
    const uint16_t h = uint16_t(rng());
    if ((h & exp_mask) != exp_mask) return h;
  }
}

uint16_t bits_of(DType dtype, float v) {
  return dtype == DType::kBF16 ? float_to_bf16_bits(v) : float_to_f16_bits(v);
}

// A [rows, cols] weight whose rows cycle through the edge cases above.
std::vector<uint16_t> edge_weight(DType dtype, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::vector<uint16_t> w(size_t(rows * cols));
  // f16 spans 2^-24 .. 65504, bf16 2^-133 .. 3.4e38.
  const int lo_exp = dtype == DType::kBF16 ? -120 : -14, hi_exp = dtype == DType::kBF16 ? 100 : 12;
  std::uniform_int_distribution<int> exp(lo_exp, hi_exp);
  std::uniform_real_distribution<float> u(-0.5f, 1.f);  // not centred on zero
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = w.data() + r * cols;
    const float mag = std::ldexp(1.f, exp(rng));
    for (int64_t c = 0; c < cols; ++c) {
      switch (r % 6) {
        case 0: row[c] = random_finite(dtype, rng); break;
        case 1: row[c] = bits_of(dtype, u(rng) * mag); break;
        case 2: row[c] = 0; break;                                  // zeros: scale 1
        case 3: row[c] = uint16_t(c % 2 ? 0x8000 : 0); break;       // signed zeros
        case 4: row[c] = bits_of(dtype, u(rng) * 1e-3f); break;
        default: row[c] = bits_of(dtype, (c == cols / 2 ? -60000.f : 1.f) * u(rng)); break;
      }
    }
  }
  return w;
}

// The kernel's codes, scales and reported row for w ([rows, cols] of dtype).
struct GpuResult {
  std::vector<uint8_t> codes;
  std::vector<float> scale;
  unsigned bad_row;
};

GpuResult quantize_on_gpu(const std::vector<uint16_t>& w, DType dtype, int64_t rows, int64_t cols) {
  Dev<uint16_t> dw(w);
  Dev<uint8_t> codes(static_cast<size_t>(rows * cols));
  Dev<float> scales(static_cast<size_t>(rows));
  Dev<unsigned> bad(std::vector<unsigned>{UINT_MAX});
  codes.poison();
  scales.poison();
  cuda::quantize_weight_fp8(codes.ptr, scales.ptr, dw.ptr, dtype == DType::kF16, rows, cols,
                            bad.ptr, nullptr);
  return {codes.get(), scales.get(), bad.get()[0]};
}

void expect_bitwise(const GpuResult& got, const Fp8Rows& want, const std::string& what) {
  ASSERT_EQ(got.bad_row, UINT_MAX) << what;
  ASSERT_EQ(got.codes.size(), want.q.size()) << what;
  for (size_t i = 0; i < want.q.size(); ++i)
    ASSERT_EQ(int(got.codes[i]), int(want.q[i])) << what << " code " << i;
  for (size_t r = 0; r < want.scale.size(); ++r)  // bits, not values: -0 vs 0 would differ too
    ASSERT_EQ(std::memcmp(&got.scale[r], &want.scale[r], 4), 0)
        << what << " scale " << r << ": " << got.scale[r] << " vs " << want.scale[r];
}

TEST(Fp8WeightQuantize, KernelMatchesHostBitwise) {
  std::mt19937 rng(33);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {6, 7}, {12, 13}, {7, 256}, {30, 1000}, {13, 4099}, {3, 11008}, {257, 64}};
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (auto [rows, cols] : shapes) {
      const std::vector<uint16_t> w = edge_weight(dtype, rows, cols, rng);
      const std::string what = std::string(dtype_name(dtype)) + " [" + std::to_string(rows) +
                               ", " + std::to_string(cols) + "]";
      const Fp8Rows want = quantize_fp8_rows(TensorView{dtype, {rows, cols}, w.data()}, "w");
      expect_bitwise(quantize_on_gpu(w, dtype, rows, cols), want, what);
    }
  }
}

TEST(Fp8WeightQuantize, NonFiniteRowsAreReported) {
  std::mt19937 rng(34);
  const int64_t rows = 9, cols = 300;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const uint16_t inf = dtype == DType::kBF16 ? 0x7f80 : 0x7c00;
    std::vector<uint16_t> w = edge_weight(dtype, rows, cols, rng);
    w[size_t(7 * cols + 5)] = uint16_t(inf | 1);  // NaN
    w[size_t(4 * cols + 299)] = uint16_t(inf | 0x8000);  // -inf
    EXPECT_EQ(quantize_on_gpu(w, dtype, rows, cols).bad_row, 4u) << dtype_name(dtype);
  }
}

// The device bytes of an FP8 buffer: its codes, then its row scales' bits.
std::vector<uint8_t> device_bytes(const Buffer& b) {
  const Tensor& t = b.tensor;
  EXPECT_EQ(t.dtype, DType::kF8E4M3);
  std::vector<uint8_t> out(size_t(t.numel()) + size_t(t.dim(0)) * 4);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(out.data(), t.data, size_t(t.numel()), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(out.data() + t.numel(), t.row_scale, size_t(t.dim(0)) * 4,
                        cudaMemcpyDeviceToHost));
  return out;
}

TEST(Fp8WeightQuantize, CudaBackendLoadsMarkedWeightsAsTheHostQuantizesThem) {
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  std::mt19937 rng(35);
  const int64_t cols = 72;  // the FP8 matmuls need a multiple of 8
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    // q, k, v of 48, 16 and 16 rows; f32 ones are quantized on the host, the others on the GPU.
    std::vector<std::vector<uint16_t>> halves;
    std::vector<std::vector<float>> floats;
    std::vector<TensorView> marked, host;
    std::vector<Fp8Rows> quantized(3);
    for (int64_t rows : {48, 16, 16}) {
      halves.push_back(edge_weight(dtype == DType::kF32 ? DType::kBF16 : dtype, rows, cols, rng));
      floats.push_back(std::vector<float>(halves.back().size()));
      for (size_t i = 0; i < floats.back().size(); ++i)
        floats.back()[i] = bf16_bits_to_float(halves.back()[i]);
      const void* data = dtype == DType::kF32 ? static_cast<const void*>(floats.back().data())
                                              : halves.back().data();
      marked.push_back(TensorView{dtype, {rows, cols}, data});
      marked.back().to_fp8 = true;
    }
    for (size_t i = 0; i < 3; ++i) {
      quantized[i] = quantize_fp8_rows(marked[i], "w");
      host.push_back(TensorView{DType::kF8E4M3, marked[i].shape, quantized[i].q.data(),
                                quantized[i].scale.data()});
    }
    const std::string what = dtype_name(dtype);
    EXPECT_EQ(device_bytes(backend->load_weight(marked[0])),
              device_bytes(backend->load_weight(host[0]))) << what;
    EXPECT_EQ(device_bytes(backend->load_stacked_weight(marked)),
              device_bytes(backend->load_stacked_weight(host))) << what;
    backend->take_conversion_report();  // checks the last weight: no error
  }
  // A NaN is a load error, found at the next weight or at the end of the load.
  std::vector<uint16_t> w = edge_weight(DType::kBF16, 16, cols, rng);
  w[size_t(11 * cols + 3)] = 0x7fc1;
  TensorView bad{DType::kBF16, {16, cols}, w.data()};
  bad.to_fp8 = true;
  backend->load_weight(bad);
  try {
    backend->take_conversion_report();
    ADD_FAILURE() << "no error for a NaN";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[16, 72] to FP8: row 11 holds a NaN"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace flashserve
