// Checkpoints of the bare backbone (Qwen3Model, as the Qwen3-Embedding checkpoints are saved):
// tensor names without "model." and often no lm_head. Their tensors load under our names and give
// the same embeddings (and, with a head, logits) as the causal-LM folder they were made from; an
// untied folder without lm_head.weight loads for embeddings only and is an error for generation.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/model_runner.h"
#include "tests/model/model_test_util.h"
#include "tests/weights/weights_test_util.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/random_model.h"
#include "weights/safetensors_writer.h"

namespace flashserve {
namespace {

ModelConfig untied_qwen3() {
  ModelConfig c = test::small_config({64, 96, 2, 4, 2, 16, 200, 64, false});
  set_architecture(c, "Qwen3ForCausalLM");
  c.eos_token_ids = {2};
  return c;
}

// The causal-LM folder every bare one is made from. Weights of scale 0.2 move the hidden state
// far from its embedding row, so a tensor read under the wrong name shows in the output.
std::string causal_lm_folder() {
  const std::string dir = test::fresh_dir("causal_lm");
  write_random_hf_model(dir, untied_qwen3(), 11, DType::kF32, 1, 0.2f);
  return dir;
}

// Rewrites the f32 model in `from` the way a bare Qwen3Model is saved: names without "model.",
// over `num_shards` files (more than one: with model.safetensors.index.json), lm_head kept only
// when asked. Returns the new folder.
std::string write_bare(const std::string& from, int num_shards, bool keep_lm_head) {
  const std::string dir = test::fresh_dir("bare" + std::to_string(num_shards));
  const auto model = load_model(from);
  std::vector<std::vector<WriterTensor>> shards(static_cast<size_t>(num_shards));
  nlohmann::json weight_map = nlohmann::json::object();
  size_t i = 0;
  for (const auto& [name, shape] : llama_tensor_shapes(model->config())) {
    if (name == "lm_head.weight" && !keep_lm_head) continue;
    const std::string bare = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
    const TensorView& t = model->tensor(name);
    const auto* p = static_cast<const uint8_t*>(t.data);
    const size_t shard = i++ % shards.size();
    shards[shard].push_back({{bare, DType::kF32, shape}, {p, p + t.numel() * 4}});
    weight_map[bare] = "model-0000" + std::to_string(shard + 1) + ".safetensors";
  }
  if (num_shards == 1) {
    write_safetensors(dir + "/model.safetensors", shards[0]);
  } else {
    for (size_t s = 0; s < shards.size(); ++s)
      write_safetensors(dir + "/model-0000" + std::to_string(s + 1) + ".safetensors", shards[s]);
    test::write_text(dir + "/model.safetensors.index.json",
                     nlohmann::json{{"weight_map", weight_map}}.dump());
  }
  test::fs::copy_file(from + "/config.json", dir + "/config.json");
  return dir;
}

// modules.json and 1_Pooling/config.json of a sentence-transformers last-token embedder.
void declare_pooling(const std::string& dir) {
  test::fs::create_directories(dir + "/1_Pooling");
  test::write_text(dir + "/modules.json",
                   R"([{"path":"","type":"sentence_transformers.models.Transformer"},)"
                   R"({"path":"1_Pooling","type":"sentence_transformers.models.Pooling"}])");
  test::write_text(dir + "/1_Pooling/config.json",
                   R"({"word_embedding_dimension": 64, "pooling_mode_lasttoken": true})");
}

std::unique_ptr<LoadedModel> load(const std::string& dir, ModelTask task) {
  return load_model(dir, LoadOptions{.task = task});
}

std::string load_error(const std::string& dir, ModelTask task) {
  try {
    load(dir, task);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "loading " << dir << " succeeded";
  return "";
}

// One CPU step over a fixed prompt: the last position's final-norm hidden state (hidden) or logits.
std::vector<float> last_position(const LoadedModel& model, bool hidden) {
  ModelRunnerOptions ro;
  ro.kv_cache_tokens = 64, ro.threads = 1;
  auto runner = ModelRunner::create(model, ro);
  test::BlockPool pool(runner->num_kv_blocks(), 3);
  test::TestSeq seq;
  seq.tokens = {5, 17, 99, 3, 150, 42, 7, 188, 61};
  StepPlan plan;
  plan.chunks.push_back(seq.chunk(int(seq.tokens.size()), runner->block_size(), pool,
                                  hidden ? LogitsWanted::kHidden : LogitsWanted::kLast));
  std::vector<float> logits, states;
  runner->step(plan, &logits, nullptr, &states);
  return hidden ? states : logits;
}

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(BareCheckpoint, WithoutLmHeadGivesTheSameEmbeddingsForEmbedding) {
  const std::string from = causal_lm_folder();
  const auto want = last_position(*load_model(from), true);
  ASSERT_EQ(want.size(), 64u);
  for (int shards : {1, 2}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    const std::string dir = write_bare(from, shards, false);
    if (shards == 2) {  // as Qwen3Model.save_pretrained names it (the same family)
      auto config = nlohmann::json::parse(hf_config_json(untied_qwen3()));
      config["architectures"] = {"Qwen3Model"};
      test::write_text(dir + "/config.json", config.dump());
    }
    const auto model = load(dir, ModelTask::kEmbed);
    EXPECT_TRUE(model->config().qk_norm);
    EXPECT_TRUE(model->config().tie_word_embeddings);  // the head's place taken by the embeddings
    EXPECT_FALSE(model->has_tensor("lm_head.weight"));
    // Same weights, same CPU arithmetic: the same bits.
    EXPECT_EQ(last_position(*model, true), want);
    // --task auto: the folder's Pooling module makes it an embedder.
    EXPECT_MSG(load_error(dir, ModelTask::kAuto), "missing tensor 'lm_head.weight'");
    declare_pooling(dir);
    EXPECT_EQ(last_position(*load(dir, ModelTask::kAuto), true), want);
  }
}

TEST(BareCheckpoint, WithoutLmHeadIsAnErrorForGeneration) {
  const std::string from = causal_lm_folder();
  const std::string one = write_bare(from, 1, false), two = write_bare(from, 2, false);
  EXPECT_MSG(load_error(one, ModelTask::kGenerate),
             one + "/model.safetensors: missing tensor 'lm_head.weight'");
  EXPECT_MSG(load_error(two, ModelTask::kGenerate),
             two + "/model.safetensors.index.json: missing tensor 'lm_head.weight'");
  EXPECT_MSG(load_error(one, ModelTask::kGenerate), "--task embed");
  // The default options are for generation, even on a folder that declares pooling.
  declare_pooling(one);
  EXPECT_MSG(load_error(one, ModelTask::kGenerate), "missing tensor 'lm_head.weight'");
  try {
    load_model(one);
    ADD_FAILURE() << "loaded without lm_head for generation";
  } catch (const Error& e) {
    EXPECT_MSG(std::string(e.what()), "missing tensor 'lm_head.weight'");
  }
}

TEST(BareCheckpoint, WithLmHeadGeneratesLikeTheCausalLmFolder) {
  const std::string from = causal_lm_folder();
  const std::string dir = write_bare(from, 2, true);
  const auto model = load(dir, ModelTask::kGenerate);
  EXPECT_FALSE(model->config().tie_word_embeddings);
  EXPECT_EQ(last_position(*model, false), last_position(*load_model(from), false));
}

TEST(BareCheckpoint, MissingTensorsNameTheStoredName) {
  const std::string dir = write_bare(causal_lm_folder(), 2, false);
  const std::string index = dir + "/model.safetensors.index.json";
  const std::vector<uint8_t> text = test::read_bytes(index);
  auto j = nlohmann::json::parse(text.begin(), text.end());
  j["weight_map"].erase("layers.1.mlp.up_proj.weight");
  test::write_text(index, j.dump());
  EXPECT_MSG(load_error(dir, ModelTask::kEmbed),
             index + ": missing tensor 'layers.1.mlp.up_proj.weight' in weight_map");
}

}  // namespace
}  // namespace flashserve
