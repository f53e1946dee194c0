// gpt-oss checkpoints: the published config reads as the architecture it is (windows, YaRN,
// experts, biases, sinks, MXFP4); a random gpt-oss model loads with its MXFP4 experts left in
// the mapped file, and their values are those the independent numpy dequantizer
// (tools/llama_reference.py's dequantize_mxfp4) reads from the same bytes; bad MXFP4 tensors
// and other microscaling formats are start-up errors that name them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>

#include "tests/model/gptoss_test_util.h"
#include "tests/weights/config_test_util.h"
#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/mxfp4_weights.h"
#include "weights/packed_views.h"
#include "weights/random_model.h"
#include "weights/safetensors.h"

namespace flashserve::test {
namespace {

TEST(GptOssConfig, PublishedConfigReads) {
  const std::string dir = fresh_dir("cfg");
  write_text(dir + "/config.json", published("gpt-oss-20b").dump());
  const ModelConfig c = read_hf_config(dir + "/config.json");
  EXPECT_EQ(c.architecture, "GptOssForCausalLM");
  EXPECT_TRUE(c.qkv_bias && c.o_bias && c.attention_sinks);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.quant_method, "mxfp4");
  EXPECT_EQ(c.moe.num_experts, 32);
  EXPECT_EQ(c.moe.top_k, 4);
  EXPECT_EQ(c.moe.intermediate, 2880);
  EXPECT_TRUE(c.moe.renormalize);  // softmax over the top k = the renormalised top-k
  EXPECT_FLOAT_EQ(c.moe.swiglu_limit, 7.f);
  ASSERT_EQ(c.layer_windows.size(), 24u);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(c.layer_windows[size_t(i)], i % 2 == 0 ? 128 : 0) << i;
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_FLOAT_EQ(c.rope_scaling.factor, 32.f);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.max_model_len, 131072);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{200002});
}

TEST(GptOssConfig, WrittenConfigReadsBack) {
  const ModelConfig c = gpt_oss_config();
  const std::string dir = fresh_dir("back");
  write_text(dir + "/config.json", hf_config_json(c));
  const ModelConfig r = read_hf_config(dir + "/config.json");
  EXPECT_EQ(r.layer_windows, c.layer_windows);
  EXPECT_EQ(r.moe.num_experts, c.moe.num_experts);
  EXPECT_EQ(r.moe.top_k, c.moe.top_k);
  EXPECT_EQ(r.moe.swiglu_limit, c.moe.swiglu_limit);
  EXPECT_EQ(r.quant_method, "mxfp4");
  EXPECT_TRUE(r.o_bias && r.attention_sinks);
}

TEST(GptOssConfig, OtherMicroscalingFormatsAndBf16ExpertsAreRefused) {
  nlohmann::json j = published("gpt-oss-20b");
  for (const char* method : {"nvfp4", "mxfp8"}) {
    j["quantization_config"] = {{"quant_method", method}};
    EXPECT_MSG(config_error(j), std::string("quant_method \"") + method + "\" is not supported");
  }
  j["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
  EXPECT_MSG(config_error(j), "NVFP4");
  j.erase("quantization_config");
  EXPECT_MSG(config_error(j), "needs its experts in MXFP4");
  nlohmann::json llama = published("llama3.2-1b-instruct");
  llama["quantization_config"] = {{"quant_method", "mxfp4"}};
  EXPECT_MSG(config_error(llama), "GptOssForCausalLM's experts only");
}

// The random model's experts of layer 0, stored and loaded.
class GptOssCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir("gptoss");
    write_random_hf_model(dir_, gpt_oss_config(2), 7, DType::kBF16);
  }
  // Rewrites config.json with `edit` applied.
  void edit_config(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(read_bytes(dir_ + "/config.json"));
    edit(j);
    write_text(dir_ + "/config.json", j.dump());
  }
  std::string dir_;
};

TEST_F(GptOssCheckpoint, ExpertsStayMappedAndMatchNumpyDequantization) {
  auto model = load_model(dir_);
  const std::string name = moe_stacked_name(0, ExpertProj::kGate);
  const TensorView& t = model->tensor(name);
  ASSERT_TRUE(t.mxfp4);
  EXPECT_EQ(t.data, nullptr);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{4, 64, 64}));
  EXPECT_TRUE(is_mapped_from(t.mxfp4->blocks, dir_ + "/model.safetensors"));
  EXPECT_TRUE(is_mapped_from(t.mxfp4->scales, dir_ + "/model.safetensors"));
  std::vector<float> values;
  const TensorView v = unpacked_view(t, &values);
  ASSERT_EQ(v.numel(), 4 * 64 * 64);
  if (std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with numpy not available";
  const std::string out = dir_ + "/numpy.f64";
  const std::string cmd =
      "/usr/bin/python3 -c \"import sys; sys.path.insert(0, '" + std::string(FS_SOURCE_DIR) +
      "/tools'); import llama_reference as r; t = {}; r.read_safetensors('" + dir_ +
      "/model.safetensors', t); r.dequantize_mxfp4(t['" + name + "_blocks'], t['" + name +
      "_scales']).astype('<f8').tofile('" + out + "')\"";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const std::vector<uint8_t> bytes = read_bytes(out);
  ASSERT_EQ(bytes.size(), values.size() * 8);
  int nonzero = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    double want;
    std::memcpy(&want, bytes.data() + i * 8, 8);
    ASSERT_EQ(double(values[i]), want) << i;  // powers of two times E2M1 codes: exact
    nonzero += want != 0;
  }
  EXPECT_GT(nonzero, int(values.size()) / 2);
}

TEST_F(GptOssCheckpoint, BlocksOfAnotherShapeNameTheTensor) {
  edit_config([](nlohmann::json& j) { j["num_local_experts"] = 8; });
  EXPECT_MSG(error_of([&] { load_model(dir_); }, "loaded"),
             "model.layers.0.mlp.experts.gate_up_proj_blocks' has shape [4, 64, 2, 16] but the "
             "config needs [8, 64, 2, 16]");
}

TEST_F(GptOssCheckpoint, ExpertRowsOfAnotherSizeNameTheTensor) {
  edit_config([](nlohmann::json& j) { j["intermediate_size"] = 64; });
  EXPECT_MSG(error_of([&] { load_model(dir_); }, "loaded"),
             "model.layers.0.mlp.experts.gate_up_proj_blocks' has shape [4, 64, 2, 16] but the "
             "config needs [4, 128, 2, 16]");
}

TEST_F(GptOssCheckpoint, NanScaleNamesTheTensor) {
  const std::string file = dir_ + "/model.safetensors";
  std::vector<uint8_t> bytes = read_bytes(file);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const auto j = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + int64_t(header));
  const std::string name = moe_stacked_name(1, ExpertProj::kDown) + "_scales";
  const uint64_t at = 8 + header + j[name]["data_offsets"][0].get<uint64_t>();
  bytes[at + 5] = 255;
  write_bytes(file, bytes.data(), bytes.size());
  EXPECT_MSG(error_of([&] { load_model(dir_); }, "loaded"),
             "tensor '" + name + "' holds the NaN scale 255 (expert 0, row 5)");
}

}  // namespace
}  // namespace flashserve::test
