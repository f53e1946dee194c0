// Damaged HF model folders: each must fail with one flashserve::Error whose message names the
// file and the problem (and never crash; this test also runs under ASan/UBSan).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model.h"
#include "weights/random_model.h"

namespace flashserve {
namespace {

using nlohmann::json;

ModelConfig tiny_config() { return test::small_config({16, 24, 1, 2, 1, 8, 12, 32, true}); }

// A valid F32 header for `c`'s tensors laid out back to back; *data_size gets the total.
json valid_header(const ModelConfig& c, uint64_t* data_size) {
  json h = json::object();
  uint64_t off = 0;
  for (const auto& [name, shape] : llama_tensor_shapes(c)) {
    uint64_t n = 4;
    for (int64_t d : shape) n *= uint64_t(d);
    h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  *data_size = off;
  return h;
}

// Writes header text (space-padded to `pad_to` bytes) and data_size zero bytes; the 8-byte length
// field says `len_field` when given, else the true header length.
void write_raw(const std::string& path, std::string header, uint64_t data_size,
               size_t pad_to = 8, int64_t len_field = -1) {
  header.resize((header.size() + pad_to - 1) / pad_to * pad_to, ' ');
  const uint64_t len = len_field >= 0 ? uint64_t(len_field) : header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = char(uint8_t(len >> (8 * i)));
  bytes += header + std::string(data_size, '\0');
  test::write_text(path, bytes);
}

class BadModelFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_dir("m");
    test::write_text(dir_ + "/config.json", hf_config_json(tiny_config()));
    header_ = valid_header(tiny_config(), &data_size_);
  }
  // Loads dir_ and returns the error message, failing the test when loading succeeds.
  std::string error() {
    try {
      load_model(dir_);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "loading " << dir_ << " succeeded";
    return "";
  }
  void write_header() { write_raw(st(), header_.dump(), data_size_); }
  std::string st() const { return dir_ + "/model.safetensors"; }
  std::string dir_;
  json header_;
  uint64_t data_size_ = 0;
};

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST_F(BadModelFiles, ValidBaselineLoads) {
  write_header();
  EXPECT_NO_THROW(load_model(dir_));
}

TEST_F(BadModelFiles, MissingFiles) {
  EXPECT_MSG(error(), dir_ + ": no model.safetensors and no model.safetensors.index.json");
  test::fs::remove(dir_ + "/config.json");
  EXPECT_MSG(error(), dir_ + ": no config.json (Hugging Face) and no *.bin");
}

TEST_F(BadModelFiles, BadConfigJson) {
  write_header();
  const std::string cfg = dir_ + "/config.json";
  test::write_text(cfg, "{\"hidden_size\": 16,");
  EXPECT_MSG(error(), cfg + ": not valid JSON");
  json j = json::parse(hf_config_json(tiny_config()));
  j["architectures"] = {"GemmaForCausalLM"};
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": unsupported architecture [\"GemmaForCausalLM\"] (supported: "
                            "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                            "Qwen3ForCausalLM, Phi3ForCausalLM, GraniteForCausalLM, "
                            "Olmo2ForCausalLM, SmolLM3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, "
                            "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, "
                            "GptOssForCausalLM)");
  j.erase("architectures");
  j["model_type"] = "gpt2";
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": unknown architecture");
  j["model_type"] = "llama";
  j.erase("hidden_size");
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": missing \"hidden_size\"");
  j["hidden_size"] = "16";
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": \"hidden_size\" must be an integer");
  j["hidden_size"] = 16;
  j["num_key_value_heads"] = 3;
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": num_attention_heads 2 is not a multiple of num_key_value_heads 3");
  j["num_key_value_heads"] = 1;
  j["num_hidden_layers"] = 2000000000;
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": num_hidden_layers 2000000000 is implausibly large");
  j["num_hidden_layers"] = 1;
  j["eos_token_id"] = {2, -1};
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": \"eos_token_id\" entries must be non-negative integers");
  j["eos_token_id"] = 2;
  j["rope_scaling"] = {{"type", "mrope"}, {"factor", 4.0}};
  test::write_text(cfg, j.dump());
  EXPECT_MSG(error(), cfg + ": unsupported rope_scaling type \"mrope\"");
}

TEST_F(BadModelFiles, TruncatedFiles) {
  test::write_text(st(), "abcd");
  EXPECT_MSG(error(), st() + ": truncated safetensors file: 4 bytes");
  write_header();
  auto bytes = test::read_bytes(st());
  test::write_bytes(st(), bytes.data(), bytes.size() - 100);
  EXPECT_MSG(error(), st() + ": tensor 'model.layers.0.mlp.down_proj.weight' data_offsets");
  EXPECT_MSG(error(), "point outside the data area");
  test::write_bytes(st(), bytes.data(), 20);
  EXPECT_MSG(error(), st() + ": safetensors header length");
  EXPECT_MSG(error(), "points outside the file (20 bytes)");
}

TEST_F(BadModelFiles, HeaderLengthAndJson) {
  write_raw(st(), header_.dump(), data_size_, 8, int64_t(1) << 62);
  EXPECT_MSG(error(), st() + ": safetensors header length 4611686018427387904 points outside");
  write_raw(st(), "{\"a\": [1, 2", data_size_);
  EXPECT_MSG(error(), st() + ": safetensors header is not valid JSON");
  write_raw(st(), "[1, 2]", data_size_);
  EXPECT_MSG(error(), st() + ": safetensors header is not a JSON object");
}

TEST_F(BadModelFiles, OffsetsOutsideOrOverlapping) {
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  json saved = header_[name];
  header_[name]["data_offsets"] = {data_size_ - 4, data_size_ - 4 + 24 * 16 * 4};
  write_header();
  EXPECT_MSG(error(), st() + ": tensor '" + name + "' data_offsets");
  EXPECT_MSG(error(), "point outside the data area of " + std::to_string(data_size_) + " bytes");
  header_[name]["data_offsets"] = {8, 4};
  write_header();
  EXPECT_MSG(error(), "point outside the data area");
  header_[name]["data_offsets"] = {-8, 4};
  write_header();
  EXPECT_MSG(error(), st() + ": tensor '" + name + "' data_offsets must be a non-negative integer");
  header_[name] = saved;
  header_[name]["data_offsets"] = header_["model.layers.0.mlp.gate_proj.weight"]["data_offsets"];
  write_header();
  EXPECT_MSG(error(), st() + ": safetensors tensors overlap in the data area");
  header_[name] = saved;
  header_[name]["data_offsets"][1] = saved["data_offsets"][1].get<uint64_t>() - 4;
  write_header();
  EXPECT_MSG(error(), st() + ": tensor '" + name + "' data_offsets span 1532 bytes");
  header_[name] = saved;
  header_[name]["shape"] = {uint64_t(1) << 40, uint64_t(1) << 40};
  write_header();
  EXPECT_MSG(error(), st() + ": tensor '" + name + "' shape is too large");
}

TEST_F(BadModelFiles, WrongDtypes) {
  const std::string name = "model.norm.weight";  // F32 [16] = 64 bytes
  header_[name]["dtype"] = "I64";
  header_[name]["shape"] = {8};
  write_header();
  EXPECT_MSG(error(), st() + ": tensor 'model.norm.weight' has dtype I64; only F32, F16, BF16");
  header_[name]["dtype"] = "F99";
  write_header();
  EXPECT_MSG(error(), st() + ": tensor 'model.norm.weight' has unknown dtype 'F99'");
  header_[name]["dtype"] = 4;
  write_header();
  EXPECT_MSG(error(), st() + ": tensor 'model.norm.weight' dtype must be a string");
}

TEST_F(BadModelFiles, MisalignedData) {
  // A header of 4k+2 bytes puts every F32 tensor at an odd 2-byte boundary.
  std::string text = header_.dump();
  text.resize((text.size() + 7) / 8 * 8 + 2, ' ');
  write_raw(st(), text, data_size_, 1);
  EXPECT_MSG(error(), st() + ": tensor '");
  EXPECT_MSG(error(), "data is not aligned to its 4-byte elements");
}

TEST_F(BadModelFiles, ShapesDisagreeWithConfig) {
  write_random_hf_model(dir_, tiny_config(), 3, DType::kBF16);
  ModelConfig other = tiny_config();
  other.intermediate_size = 32;
  test::write_text(dir_ + "/config.json", hf_config_json(other));
  EXPECT_MSG(error(), st() + ": tensor 'model.layers.0.mlp.");
  EXPECT_MSG(error(), "has shape [24, 16] but the config needs [32, 16]");
}

TEST_F(BadModelFiles, MissingTensors) {
  header_.erase("model.layers.0.self_attn.v_proj.weight");
  write_header();
  EXPECT_MSG(error(), st() + ": missing tensor 'model.layers.0.self_attn.v_proj.weight'");
  // Untied config but no lm_head in the file.
  write_random_hf_model(dir_, tiny_config(), 3, DType::kF32);
  ModelConfig untied = tiny_config();
  untied.tie_word_embeddings = false;
  test::write_text(dir_ + "/config.json", hf_config_json(untied));
  EXPECT_MSG(error(), st() + ": missing tensor 'lm_head.weight'");
}

TEST_F(BadModelFiles, BadShardIndex) {
  write_random_hf_model(dir_, tiny_config(), 3, DType::kF16, 2);
  const std::string index = dir_ + "/model.safetensors.index.json";
  EXPECT_NO_THROW(load_model(dir_));
  json j = json::parse(test::read_bytes(index));
  const std::string shard2 = dir_ + "/model-00002-of-00002.safetensors";
  test::fs::remove(shard2);
  EXPECT_MSG(error(), shard2 + ": cannot open");
  j["weight_map"].erase("model.norm.weight");
  test::write_text(index, j.dump());
  EXPECT_MSG(error(), index + ": missing tensor 'model.norm.weight' in weight_map");
  j["weight_map"]["model.norm.weight"] = "../../etc/passwd";
  test::write_text(index, j.dump());
  EXPECT_MSG(error(), index + ": weight_map entry 'model.norm.weight' names a bad file");
  j["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";  // not in that shard
  test::write_text(index, j.dump());
  EXPECT_MSG(error(), "model-00001-of-00002.safetensors: missing tensor 'model.norm.weight'");
  test::write_text(index, "{\"weight_map\": 3}");
  EXPECT_MSG(error(), index + ": no \"weight_map\" object");
  test::write_text(index, "not json");
  EXPECT_MSG(error(), index + ": not valid JSON");
}

}  // namespace
}  // namespace flashserve
