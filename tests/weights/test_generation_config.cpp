// generation_config.json and the EOS list (unit): its eos_token_id (an int or a list) is added to
// config.json's, or replaces the built-in default when config.json names none; its sampling
// settings become ModelConfig::generation; bad values are start-up errors naming the file; a
// model whose configs name no EOS takes the tokenizer's (LoadedModel::use_tokenizer_eos).
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"
#include "weights/random_model.h"

namespace flashserve {
namespace {

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(GenerationConfig, EosIdsAreAddedAndSamplingDefaultsRead) {
  const std::string dir = test::fresh_dir("gen");
  ModelConfig c;
  c.eos_token_ids = {2};
  c.eos_from_config = true;
  read_generation_config(write(dir, "generation_config.json",
                               R"({"eos_token_id":[2,7,9],"temperature":0.6,"top_p":0.9,
                                   "top_k":20,"repetition_penalty":1.1,"do_sample":true})"),
                         &c);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 7, 9}));  // no duplicate 2
  ASSERT_TRUE(c.generation.temperature && c.generation.top_p && c.generation.top_k &&
              c.generation.repetition_penalty);
  EXPECT_FLOAT_EQ(*c.generation.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*c.generation.top_p, 0.9f);
  EXPECT_EQ(*c.generation.top_k, 20);
  EXPECT_FLOAT_EQ(*c.generation.repetition_penalty, 1.1f);
}

TEST(GenerationConfig, ReplacesTheBuiltInDefaultAndLeavesUnsetFieldsUnset) {
  const std::string dir = test::fresh_dir("gen");
  ModelConfig c;  // eos {2}, not from a config
  read_generation_config(write(dir, "generation_config.json", R"({"eos_token_id":128009})"), &c);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{128009}));
  EXPECT_TRUE(c.eos_from_config);
  EXPECT_FALSE(c.generation.temperature || c.generation.top_p || c.generation.top_k ||
               c.generation.repetition_penalty);
}

TEST(GenerationConfig, BadValuesNameTheFile) {
  const std::string dir = test::fresh_dir("gen");
  for (const char* bad : {R"({"eos_token_id":[2,-1]})", R"({"eos_token_id":"2"})",
                          R"({"temperature":"hot"})", R"({"top_p":0})", R"({"top_k":-3})",
                          R"({"repetition_penalty":0})", "[1,2]", "{not json"}) {
    ModelConfig c;
    const std::string path = write(dir, "generation_config.json", bad);
    try {
      read_generation_config(path, &c);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

TEST(GenerationConfig, LoaderMergesItAndTheTokenizerEosIsTheFallback) {
  ModelConfig c;
  c.hidden_size = 16, c.intermediate_size = 32, c.num_layers = 1, c.num_q_heads = 2;
  c.num_kv_heads = 1, c.head_dim = 8, c.vocab_size = 40, c.max_model_len = 32;
  c.eos_token_ids = {2};
  const std::string dir = test::fresh_dir("model");
  write_random_hf_model(dir, c, 1, DType::kF32);
  // config.json written by hf_config_json names eos 2: the tokenizer's EOS does not replace it.
  auto m = load_model(dir);
  m->use_tokenizer_eos(5);
  EXPECT_EQ(m->config().eos_token_ids, (std::vector<int>{2}));
  write(dir, "generation_config.json", R"({"eos_token_id":[2,31],"top_k":3})");
  m = load_model(dir);
  EXPECT_EQ(m->config().eos_token_ids, (std::vector<int>{2, 31}));
  EXPECT_EQ(m->config().generation.top_k, 3);
  // A config.json without eos_token_id and no generation_config: the tokenizer's EOS.
  std::string text = hf_config_json(c);
  text.erase(text.find("\"eos_token_id\""), text.find('\n', text.find("\"eos_token_id\"")) -
                                                text.find("\"eos_token_id\"") + 1);
  write(dir, "config.json", text);
  std::filesystem::remove(dir + "/generation_config.json");
  m = load_model(dir);
  m->use_tokenizer_eos(5);
  EXPECT_EQ(m->config().eos_token_ids, (std::vector<int>{5}));
}

}  // namespace
}  // namespace flashserve
