// The CUDA backend's int4 loads (backends/cuda/cuda_int4.cpp: the checkpoint's words uploaded as
// stored and laid out on the GPU) against the CPU twin: each committed int4 model's projections,
// alone, stacked as LlamaModel stacks them (q/k/v, gate/up, where they stack packed) and with
// rewritten rows (reversed, scaled), read back after load_weight / load_stacked_weight: codes,
// scales, zero points and permutation byte for byte what int4_gpu_layout makes of the internal
// form (unpack_int4). Covers every word packing (GPTQ, AWQ, compressed-tensors rows). Stacks
// that cannot stack packed (act-order) must be the bf16 rounding of their f32 values, bitwise.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/dtype.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/int4_gemv.h"
#include "weights/int4_weights.h"
#include "weights/loaded_model.h"

namespace flashserve {
namespace {

const std::string kData = std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/";

template <class T>
std::vector<T> download(const void* device, size_t count) {
  std::vector<T> out(count);
  CUDA_CHECK(cudaMemcpy(out.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

// The loaded weight `b` holds `stored` in the CUDA layout.
void expect_layout(Backend& backend, const Buffer& b, const Int4Stored& stored,
                   const std::string& what) {
  SCOPED_TRACE(what);
  backend.synchronize();
  const Int4Weight w = unpack_int4(stored);
  const int n = int(w.rows), k = int(w.cols), gs = int(w.group_size);
  const cuda::Int4GpuLayout want =
      cuda::int4_gpu_layout(w.packed.data(), w.scales.data(), w.zeros.data(), n, k, gs);
  ASSERT_EQ(b.tensor.dtype, DType::kI4);
  ASSERT_EQ(b.tensor.int4.group_size, gs);
  EXPECT_EQ(download<uint8_t>(b.tensor.data, want.codes.size()), want.codes);
  EXPECT_EQ(download<float>(b.tensor.int4.scales, want.scales.size()), want.scales);
  EXPECT_EQ(download<uint8_t>(b.tensor.int4.zeros, want.zeros.size()), want.zeros);
  ASSERT_EQ(b.tensor.int4.perm != nullptr, !w.perm.empty());
  if (!w.perm.empty()) {
    EXPECT_EQ(download<int32_t>(b.tensor.int4.perm, w.perm.size()), w.perm);
  }
}

// A stack that cannot stay packed: one bf16 weight on the GPU, each part's dequantized values
// rounded once to bf16.
void expect_bf16_stack(Backend& backend, const std::vector<TensorView>& views,
                       const std::vector<const Int4Stored*>& parts, const std::string& what) {
  const Buffer b = backend.load_stacked_weight(views);
  backend.synchronize();
  std::vector<uint16_t> want;
  for (const Int4Stored* p : parts)
    for (float v : dequantize_int4(*p)) want.push_back(float_to_bf16_bits(v));
  ASSERT_EQ(b.tensor.dtype, DType::kBF16) << what;
  EXPECT_EQ(download<uint16_t>(b.tensor.data, want.size()), want) << what;
}

TEST(CudaInt4Load, LayoutMatchesTheCpuTwin) {
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  const std::vector<std::vector<std::string>> stacks = {
      {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
      {"mlp.gate_proj", "mlp.up_proj"},
      {"self_attn.o_proj"},
      {"mlp.down_proj"}};
  int stacked = 0, as_bf16 = 0;
  for (const char* folder : {"gptq_sym", "gptq_asym_actorder", "awq", "ct_group_asym",
                             "ct_channel_sym"}) {
    auto model = load_model(kData + folder);
    for (const auto& names : stacks) {
      std::vector<TensorView> views;
      std::vector<const Int4Stored*> parts;
      for (const std::string& p : names) {
        views.push_back(model->tensor("model.layers.0." + p + ".weight"));
        parts.push_back(views.back().int4.get());
      }
      const std::string what = std::string(folder) + " " + names[0];
      if (std::find(parts.begin(), parts.end(), nullptr) != parts.end()) continue;  // ignored
      if (!int4_stackable(parts)) {  // different permutations: one bf16 weight
        ++as_bf16;
        expect_bf16_stack(*backend, views, parts, what);
        continue;
      }
      if (views.size() == 1) {
        expect_layout(*backend, backend->load_weight(views[0]), *parts[0], what);
        // Rewritten rows (partial rotary's order, Granite's factors): repacked as rows.
        const int64_t rows = parts[0]->rows;
        std::vector<int> order(static_cast<size_t>(rows));
        std::vector<float> factor(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          order[size_t(r)] = int(rows - 1 - r);
          factor[size_t(r)] = 0.75f + 0.125f * float(r % 2);
        }
        TensorView rewritten = views[0];
        rewritten.int4 =
            std::make_shared<const Int4Stored>(rewrite_int4_rows(*parts[0], order, factor));
        expect_layout(*backend, backend->load_weight(rewritten), *rewritten.int4,
                      what + " rewritten");
      } else {
        ++stacked;
        expect_layout(*backend, backend->load_stacked_weight(views), stack_int4(parts),
                      what + " stacked");
      }
    }
  }
  EXPECT_GE(stacked, 4);  // gptq_sym, awq and ct_channel_sym stack q/k/v and gate/up packed
  // The committed act-order checkpoints give q/k/v one permutation (the projections share their
  // input), so they stack packed too; parts whose permutations differ become one bf16 weight.
  EXPECT_EQ(as_bf16, 0);
  auto model = load_model(kData + "gptq_asym_actorder");
  std::vector<TensorView> views = {model->tensor("model.layers.0.self_attn.q_proj.weight"),
                                   model->tensor("model.layers.0.self_attn.k_proj.weight")};
  ASSERT_TRUE(views[1].int4);
  // k's columns in reverse order (from the identity where the checkpoint's order is sorted): a
  // permutation q does not share, which both the GPU and dequantize_int4 read the same way.
  auto reordered = std::make_shared<Int4Stored>(*views[1].int4);
  if (reordered->perm.empty())
    for (int32_t c = 0; c < int32_t(reordered->cols); ++c) reordered->perm.push_back(c);
  std::reverse(reordered->perm.begin(), reordered->perm.end());
  views[1].int4 = reordered;
  const std::vector<const Int4Stored*> parts = {views[0].int4.get(), reordered.get()};
  ASSERT_FALSE(int4_stackable(parts));
  expect_bf16_stack(*backend, views, parts, "q/k with different permutations");
  EXPECT_NE(backend->take_conversion_report().find("laid out on the GPU"), std::string::npos);
  EXPECT_EQ(backend->take_conversion_report(), "");  // reported once
}

}  // namespace
}  // namespace flashserve
