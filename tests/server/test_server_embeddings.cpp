// POST /v1/embeddings end to end (label server): the real flashserve on a tiny random Qwen3
// folder with a sentence-transformers config (modules.json, 1_Pooling last-token, Normalize),
// detected as an embedding model. Each vector is checked against the model itself, run in this
// process through a generation step: the lm_head of the unit vector must point where the last
// position's logits point (the head has more rows than columns, so only the right hidden state
// does). Also: unit norm, the same vector alone and in a batch, dimensions, base64, token-id
// inputs, usage, the 400s, and the generation endpoints refused (and /v1/embeddings on a
// generation model).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/model_runner.h"
#include "tests/server/base64_floats.h"
#include "tests/server/server_process.h"
#include "weights/hf_config.h"
#include "weights/random_model.h"

namespace flashserve::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kHidden = 64, kVocab = 512, kContext = 96;
constexpr double kMinCos = 0.9999;  // fp32 on both sides: rounding differences only

std::string make_embedding_folder() {
  const std::string dir =
      (fs::temp_directory_path() / ("fs_embed_server_" + std::to_string(getpid()))).string();
  ModelConfig c;
  set_architecture(c, "Qwen3ForCausalLM");
  c.hidden_size = kHidden, c.intermediate_size = 128, c.num_layers = 2, c.num_q_heads = 4;
  c.num_kv_heads = 2, c.head_dim = 16, c.vocab_size = kVocab, c.max_model_len = kContext;
  c.rms_norm_eps = 1e-6f, c.rope_theta = 1e6f, c.eos_token_ids = {2};
  write_random_hf_model(dir, c, 9, DType::kF32, 1, 0.2f);
  fs::copy_file(std::string(FS_MODELS_DIR) + "/stories260K/tok512.model", dir + "/tokenizer.model");
  fs::create_directories(dir + "/1_Pooling");
  std::ofstream(dir + "/modules.json")
      << R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},)"
         R"({"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},)"
         R"({"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}])";
  std::ofstream(dir + "/1_Pooling/config.json")
      << R"({"word_embedding_dimension": 64, "pooling_mode_cls_token": false,)"
         R"( "pooling_mode_mean_tokens": false, "pooling_mode_lasttoken": true})";
  return dir;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

class ServerEmbeddings : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir = new std::string(make_embedding_folder());
    server = new ServerProcess({"--model", *dir, "--served-model-name", "embedder"});
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server->stop(), 0) << server->log();
    delete server;
    fs::remove_all(*dir);
    delete dir;
  }
  void SetUp() override { ASSERT_TRUE(server->started()) << server->log(); }

  http::Response post(const std::string& path, const json& body) {
    return http::request(server->port(), "POST", path, body.dump(),
                         {"Content-Type: application/json"});
  }
  json embed(const json& body) {
    http::Response r = post("/v1/embeddings", body);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body, nullptr, false);
  }
  std::vector<float> vec(const json& response, size_t i) {
    return response["data"][i]["embedding"].get<std::vector<float>>();
  }
  std::vector<int32_t> tokens(const std::string& text) {
    http::Response r = post("/tokenize", {{"prompt", text}});
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["tokens"].get<std::vector<int32_t>>();
  }

  static std::string* dir;
  static ServerProcess* server;
};
std::string* ServerEmbeddings::dir = nullptr;
ServerProcess* ServerEmbeddings::server = nullptr;

const std::vector<std::string> kTexts = {"Once", "Once upon a time there was a little girl.",
                                         "The cat sat on the mat, and the dog barked at it."};

TEST_F(ServerEmbeddings, VectorsAreTheModelsLastTokenState) {
  const json r = embed({{"input", kTexts}, {"model", "embedder"}});
  ASSERT_EQ(r["data"].size(), kTexts.size());
  EXPECT_EQ(r["object"], "list");
  EXPECT_EQ(r["model"], "embedder");
  auto model = load_model(*dir);
  ModelRunnerOptions ro;
  ro.backend = "cpu", ro.kv_cache_tokens = 512, ro.threads = 1;
  auto runner = ModelRunner::create(*model, ro);
  const float* head = static_cast<const float*>(model->tensor("lm_head.weight").data);
  int total = 0;
  for (size_t i = 0; i < kTexts.size(); ++i) {
    EXPECT_EQ(r["data"][i]["index"], i);
    const std::vector<float> e = vec(r, i);
    ASSERT_EQ(e.size(), size_t(kHidden));
    double norm = 0;
    for (float x : e) norm += double(x) * x;
    EXPECT_NEAR(norm, 1.0, 1e-5);
    const std::vector<int32_t> ids = tokens(kTexts[i]);
    total += int(ids.size());
    std::vector<int32_t> blocks;
    for (int b = 0; b * ro.block_size < int(ids.size()); ++b) blocks.push_back(b);
    StepPlan plan;
    StepChunk ch;
    ch.tokens = ids.data(), ch.num_tokens = int(ids.size()), ch.block_table = &blocks;
    plan.chunks.push_back(ch);
    std::vector<float> logits;
    runner->step(plan, &logits);
    std::vector<float> via_head(kVocab);
    for (int v = 0; v < kVocab; ++v) {
      double s = 0;
      for (int k = 0; k < kHidden; ++k) s += double(head[v * kHidden + k]) * e[size_t(k)];
      via_head[size_t(v)] = float(s);
    }
    EXPECT_GE(cosine(via_head, logits), kMinCos) << kTexts[i];
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], total);
  EXPECT_EQ(r["usage"]["total_tokens"], total);
}

TEST_F(ServerEmbeddings, SameVectorAloneAndInABatchAndAsTokenIds) {
  const json batch = embed({{"input", kTexts}});
  for (size_t i = 0; i < kTexts.size(); ++i) {
    const std::vector<float> alone = vec(embed({{"input", kTexts[i]}}), 0);
    const std::vector<float> ids = vec(embed({{"input", tokens(kTexts[i])}}), 0);
    for (size_t k = 0; k < alone.size(); ++k) {
      EXPECT_NEAR(alone[k], vec(batch, i)[k], 1e-6) << kTexts[i];
      EXPECT_NEAR(alone[k], ids[k], 1e-6) << kTexts[i];
    }
  }
  json lists = json::array();
  for (const auto& t : kTexts) lists.push_back(tokens(t));
  const json from_lists = embed({{"input", lists}});
  for (size_t i = 0; i < kTexts.size(); ++i)
    EXPECT_GE(cosine(vec(from_lists, i), vec(batch, i)), 1 - 1e-9);
}

TEST_F(ServerEmbeddings, DimensionsAndBase64) {
  const std::vector<float> full = vec(embed({{"input", kTexts[1]}}), 0);
  const std::vector<float> cut = vec(embed({{"input", kTexts[1]}, {"dimensions", 16}}), 0);
  ASSERT_EQ(cut.size(), 16u);
  double norm = 0;
  for (size_t k = 0; k < 16; ++k) norm += double(full[k]) * full[k];
  for (size_t k = 0; k < 16; ++k) EXPECT_NEAR(cut[k], full[k] / std::sqrt(norm), 1e-6);
  const json b = embed({{"input", kTexts[1]}, {"encoding_format", "base64"}});
  const std::string s = b["data"][0]["embedding"].get<std::string>();
  EXPECT_EQ(s.size(), (size_t(kHidden) * 4 + 2) / 3 * 4);
  EXPECT_EQ(floats_from_base64(s), full);  // the same float32 values, bit for bit
}

TEST_F(ServerEmbeddings, BadRequestsAre400s) {
  for (const json& body :
       {json{{"input", ""}}, json{{"input", json::array()}},
        json{{"input", std::vector<int32_t>(kContext + 1, 5)}},
        json{{"input", "x"}, {"dimensions", kHidden + 1}}, json{{"input", "x"}, {"dimensions", 0}},
        json{{"input", "x"}, {"encoding_format", "hex"}}, json::object()}) {
    http::Response r = post("/v1/embeddings", body);
    EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
    EXPECT_EQ(json::parse(r.body, nullptr, false)["error"]["type"], "invalid_request_error");
  }
  // A prompt of exactly max_model_len tokens fits.
  EXPECT_EQ(post("/v1/embeddings", {{"input", std::vector<int32_t>(kContext, 5)}}).status, 200);
}

TEST_F(ServerEmbeddings, GenerationEndpointsSayItIsAnEmbeddingModel) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    http::Response r =
        post(path, {{"prompt", "x"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_NE(r.body.find("is an embedding model"), std::string::npos) << path << ": " << r.body;
  }
  EXPECT_EQ(http::request(server->port(), "GET", "/v1/models").status, 200);
  EXPECT_EQ(http::request(server->port(), "GET", "/health").status, 200);
  EXPECT_GT(metric(server->port(), "flashserve_prompt_tokens_total"), 0) << "metrics";
}

TEST(ServerEmbeddingsGenerationModel, EmbeddingsSayItIsAGenerationModel) {
  ServerProcess stories;  // stories260K
  ASSERT_TRUE(stories.started()) << stories.log();
  http::Response r = http::request(stories.port(), "POST", "/v1/embeddings",
                                   json{{"input", "x"}}.dump(), {"Content-Type: application/json"});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("is a generation model"), std::string::npos) << r.body;
}

}  // namespace
}  // namespace flashserve::testing
