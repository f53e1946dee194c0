// FP8 checkpoints as Hugging Face stores them (weights/fp8_weights.h, docs/FP8.md): per-channel
// and per-tensor weight_scale load into per-row scales, --quantize fp8 quantizes the projections
// per output row, and every malformed FP8 file is a start-up error naming the file and tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/fp8.h"
#include "tests/weights/weights_test_util.h"
#include "weights/fp8_weights.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/mapped_file.h"
#include "weights/random_model.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

namespace flashserve {
namespace {

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const std::string kUp = "model.layers.1.mlp.up_proj.weight";

ModelConfig tiny() { return test::small_config({32, 48, 2, 4, 2, 8, 64, 128, false}); }

std::string load_error(const std::string& dir, Quantize q = Quantize::kNone) {
  return test::error_of([&] { load_model(dir, LoadOptions{.quantize = q}); }, "");
}

// Rewrites dir/model.safetensors through `edit` (its tensors as the writer takes them).
template <class Edit>
void rewrite(const std::string& dir, Edit edit) {
  const std::string path = dir + "/model.safetensors";
  std::vector<WriterTensor> tensors;
  {
    MappedFile file(path);
    for (const auto& [name, e] : parse_safetensors(file)) {
      const DType t = e.dtype == "F32" ? DType::kF32 : e.dtype == "BF16" ? DType::kBF16 : DType::kF8E4M3;
      tensors.push_back({{name, t, e.shape}, std::vector<uint8_t>(e.data, e.data + e.nbytes)});
    }
  }
  edit(tensors);
  write_safetensors(path, tensors);
}

WriterTensor* find(std::vector<WriterTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.spec.name == name) return &t;
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

TEST(Fp8Checkpoint, PerChannelScalesLoadAsWrittenAndMatchQuantizeAtLoad) {
  const std::string fp8 = test::fresh_dir("fp8"), f32 = test::fresh_dir("f32");
  write_random_hf_model(fp8, tiny(), 5, DType::kF32, 1, 0.05f, Fp8Layout::kPerChannel);
  write_random_hf_model(f32, tiny(), 5, DType::kF32, 1, 0.05f);
  auto a = load_model(fp8);
  auto b = load_model(f32, LoadOptions{.quantize = Quantize::kFp8});
  EXPECT_EQ(a->config().quant_method, "fp8");
  EXPECT_EQ(b->config().quant_method, "fp8");
  int projections = 0;
  for (const auto& [name, shape] : llama_tensor_shapes(tiny())) {
    const TensorView& ta = a->tensor(name);
    const TensorView& tb = b->tensor(name);
    ASSERT_EQ(ta.dtype, tb.dtype) << name;
    if (!is_fp8_projection(name)) {
      EXPECT_EQ(ta.dtype, DType::kF32) << name;
      continue;
    }
    ++projections;
    ASSERT_EQ(ta.dtype, DType::kF8E4M3) << name;
    const auto* qa = static_cast<const uint8_t*>(ta.data);
    const auto* qb = static_cast<const uint8_t*>(tb.data);
    EXPECT_TRUE(std::equal(qa, qa + ta.numel(), qb)) << name;
    for (int64_t r = 0; r < shape[0]; ++r) ASSERT_EQ(ta.row_scale[r], tb.row_scale[r]) << name;
    // Each row's largest |value| is 448 * scale, and no code is NaN.
    for (int64_t r = 0; r < shape[0]; ++r) {
      float amax = 0;
      for (int64_t c = 0; c < shape[1]; ++c) {
        const uint8_t q = qa[r * shape[1] + c];
        ASSERT_NE(q & 0x7f, 0x7f) << name;
        amax = std::max(amax, std::fabs(fp8_e4m3_to_float(q)));
      }
      EXPECT_EQ(amax, 448.f) << name << " row " << r;
    }
  }
  EXPECT_EQ(projections, 2 * 7);
}

TEST(Fp8Checkpoint, PerTensorScaleExpandsToEveryRowAndShardsLoadAlike) {
  const std::string one = test::fresh_dir("one"), three = test::fresh_dir("three");
  write_random_hf_model(one, tiny(), 6, DType::kBF16, 1, 0.05f, Fp8Layout::kPerTensor);
  write_random_hf_model(three, tiny(), 6, DType::kBF16, 3, 0.05f, Fp8Layout::kPerTensor);
  auto a = load_model(one);
  auto b = load_model(three);
  const TensorView& t = a->tensor(kUp);
  ASSERT_EQ(t.dtype, DType::kF8E4M3);
  for (int64_t r = 1; r < t.shape[0]; ++r) EXPECT_EQ(t.row_scale[r], t.row_scale[0]);
  EXPECT_EQ(weight_values(t), weight_values(b->tensor(kUp)));
  EXPECT_EQ(weight_values(a->tensor("model.norm.weight")),
            weight_values(b->tensor("model.norm.weight")));
}

TEST(Fp8Checkpoint, QuantizeAtLoadRowScalesAndZeroRows) {
  std::vector<float> w = {0, 0, 0, 0,  1, -2, 4, 0.5f,  -896, 1, 2, 3};  // [3, 4]
  const TensorView v{DType::kF32, {3, 4}, w.data()};
  const Fp8Rows q = quantize_fp8_rows(v, "w");
  EXPECT_EQ(q.scale, (std::vector<float>{1.f, 4.f / 448.f, 2.f}));
  EXPECT_EQ(q.q[0], 0);                      // a zero row stays zero with scale 1
  EXPECT_EQ(fp8_e4m3_to_float(q.q[6]), 448);  // the row's amax maps to 448
  EXPECT_EQ(fp8_e4m3_to_float(q.q[8]), -448);
  EXPECT_EQ(fp8_e4m3_to_float(q.q[9]), 0.5f);
  const Fp8Rows t = quantize_fp8_rows(v, "w", /*per_tensor=*/true);
  EXPECT_EQ(t.scale, (std::vector<float>{2.f, 2.f, 2.f}));
  w[5] = NAN;
  try {
    quantize_fp8_rows(v, "model.x");
    ADD_FAILURE() << "no error for a NaN";
  } catch (const Error& e) {
    EXPECT_MSG(std::string(e.what()), "cannot quantize model.x: row 1 holds nan");
  }
}

TEST(Fp8Checkpoint, QuantizeRejectsAnFp8Model) {
  const std::string dir = test::fresh_dir("m");
  write_random_hf_model(dir, tiny(), 5, DType::kBF16, 1, 0.05f, Fp8Layout::kPerChannel);
  EXPECT_MSG(load_error(dir, Quantize::kFp8),
             dir + ": --quantize fp8: the checkpoint is FP8 already");
  EXPECT_EQ(parse_quantize("fp8"), Quantize::kFp8);
  EXPECT_EQ(parse_quantize("none"), Quantize::kNone);
  EXPECT_THROW(parse_quantize("int4"), Error);
}

TEST(Fp8Checkpoint, MalformedFilesAreStartupErrors) {
  const std::string dir = test::fresh_dir("bad");
  const std::string st = dir + "/model.safetensors", scale = kUp + "_scale";
  auto fresh = [&] { write_random_hf_model(dir, tiny(), 5, DType::kBF16, 1, 0.05f, Fp8Layout::kPerChannel); };

  fresh();
  rewrite(dir, [&](auto& ts) { std::erase_if(ts, [&](auto& t) { return t.spec.name == scale; }); });
  EXPECT_MSG(load_error(dir), ": tensor '" + kUp + "' is F8_E4M3 but its scale '" + scale +
                                  "' is missing");

  fresh();
  rewrite(dir, [&](auto& ts) { find(ts, scale)->spec.shape = {32, 3}; find(ts, scale)->bytes.resize(32 * 3 * 4); });
  EXPECT_MSG(load_error(dir), st + ": tensor '" + scale + "' has shape [32, 3]; an FP8 scale is [] "
                              "or [1] (per tensor) or [48, 1] / [48] (per output channel)");

  fresh();
  rewrite(dir, [&](auto& ts) { find(ts, scale)->spec.dtype = DType::kI32; });
  EXPECT_MSG(load_error(dir), st + ": tensor '" + scale + "' has dtype I32; FP8 scales are F32");

  fresh();
  rewrite(dir, [&](auto& ts) {
    const float inf = INFINITY;
    std::memcpy(find(ts, scale)->bytes.data() + 8, &inf, 4);
  });
  EXPECT_MSG(load_error(dir), st + ": tensor '" + scale + "' holds inf; scales must be finite");

  fresh();  // finite, but 448 x scale is not: the weights would be
  rewrite(dir, [&](auto& ts) {
    const float huge = 1e38f;
    std::memcpy(find(ts, scale)->bytes.data() + 8, &huge, 4);
  });
  EXPECT_MSG(load_error(dir), st + ": tensor '" + scale + "' holds 1e+38; scales must be finite, "
                              ">= 0 and at most FLT_MAX / 448");

  fresh();  // an FP8 tensor that is not a projection
  rewrite(dir, [&](auto& ts) {
    WriterTensor* n = find(ts, "model.norm.weight");
    n->spec.dtype = DType::kF8E4M3;
    n->bytes.resize(32);
  });
  EXPECT_MSG(load_error(dir), st + ": tensor 'model.norm.weight' is F8_E4M3: only the seven "
                              "projections of each layer");

  fresh();  // FP8 tensors without quantization_config
  {
    ModelConfig c = tiny();
    test::write_text(dir + "/config.json", hf_config_json(c));
  }
  EXPECT_MSG(load_error(dir), "is F8_E4M3 but config.json has no quantization_config with "
                              "quant_method \"fp8\"");

  fresh();  // the other FP8 format: same size, so the header's dtype string is swapped in place
  {
    std::vector<uint8_t> bytes = test::read_bytes(st);
    std::string text(bytes.begin(), bytes.end());
    const size_t at = text.find("\"F8_E4M3\"", text.find("\"" + kUp + "\""));
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 9, "\"F8_E5M2\"");
    test::write_bytes(st, text.data(), text.size());
  }
  EXPECT_MSG(load_error(dir), st + ": tensor '" + kUp + "' has dtype F8_E5M2; only F32, F16, BF16 "
                              "and F8_E4M3");
}

}  // namespace
}  // namespace flashserve
