// POST /v1/embeddings at the API edge (label unit): every form of `input`, encoding_format,
// dimensions, the 400s, normalisation and Matryoshka truncation, base64 bytes, the response shape
// and which endpoints each kind of model refuses. Fake byte-level tokenizer; no engine.
#include <gtest/gtest.h>

#include <cmath>

#include "server/endpoints/embeddings.h"
#include "tests/server/base64_floats.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

using testing::floats_from_base64;

class EmbeddingsApi : public ::testing::Test {
 protected:
  EmbeddingsApi() { model.embedding_dimensions = 64; }
  testing::FakeTokenizer tok;
  ServedModel model{"embedder", 32, 262, 1700000000};

  EmbeddingsRequest ok(const json& body) {
    auto r = parse_embeddings_request(body.dump(), model, tok);
    if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << body.dump() << ": " << e->message;
    return std::holds_alternative<EmbeddingsRequest>(r) ? std::get<EmbeddingsRequest>(r)
                                                        : EmbeddingsRequest{};
  }
  ApiError err(const json& body) {
    auto r = parse_embeddings_request(body.dump(), model, tok);
    if (!std::holds_alternative<ApiError>(r)) ADD_FAILURE() << body.dump() << " was accepted";
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
  }
};

TEST_F(EmbeddingsApi, EveryFormOfInput) {
  const std::vector<int32_t> hi = tok.encode("hi", true);
  EXPECT_EQ(ok({{"input", "hi"}}).inputs, std::vector<std::vector<int32_t>>{hi});
  EXPECT_EQ(ok({{"input", {"hi", "a b"}}}).inputs,
            (std::vector<std::vector<int32_t>>{hi, tok.encode("a b", true)}));
  EXPECT_EQ(ok({{"input", {5, 6, 7}}}).inputs, (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
  EXPECT_EQ(ok({{"input", json::array({json::array({5}), json::array({6, 7})})}}).inputs,
            (std::vector<std::vector<int32_t>>{{5}, {6, 7}}));
  const EmbeddingsRequest r = ok({{"input", "x"}, {"model", "embedder"}, {"user", "u1"},
                                  {"encoding_format", "base64"}, {"dimensions", 8}});
  EXPECT_TRUE(r.base64);
  EXPECT_EQ(r.dimensions, 8);
  EXPECT_FALSE(ok({{"input", "x"}, {"encoding_format", "float"}}).base64);
  std::vector<int32_t> full(32, 9);  // exactly max_model_len
  EXPECT_EQ(ok({{"input", full}}).inputs[0].size(), 32u);
}

TEST_F(EmbeddingsApi, BadInputIsA400NamingTheField) {
  auto expect = [&](const json& body, const std::string& param, const std::string& code = "") {
    const ApiError e = err(body);
    EXPECT_EQ(e.status, 400) << body.dump();
    EXPECT_EQ(e.param, param) << body.dump() << ": " << e.message;
    if (!code.empty()) EXPECT_EQ(e.code, code) << body.dump();
  };
  expect(json::object(), "input");
  expect({{"input", ""}}, "input");
  expect({{"input", json::array()}}, "input");
  expect({{"input", {"a", ""}}}, "input");
  expect({{"input", json::array({json::array()})}}, "input");
  expect({{"input", {"a", 5}}}, "input");
  expect({{"input", json::array({json::array({1}), "a"})}}, "input");
  expect({{"input", json::array({262})}}, "input");
  expect({{"input", json::array({-1})}}, "input");
  expect({{"input", 5}}, "input");
  expect({{"input", std::vector<int32_t>(33, 9)}}, "input", "context_length_exceeded");
  expect({{"input", std::string(40, 'x')}}, "input", "context_length_exceeded");
  expect({{"input", "x"}, {"encoding_format", "hex"}}, "encoding_format");
  expect({{"input", "x"}, {"dimensions", 0}}, "dimensions");
  expect({{"input", "x"}, {"dimensions", 65}}, "dimensions");
  expect({{"input", "x"}, {"dimensions", 1.5}}, "dimensions");
  expect({{"input", "x"}, {"user", 3}}, "user");
  expect({{"input", "x"}, {"temperature", 1}}, "temperature");
  EXPECT_EQ(err({{"input", "x"}, {"model", "other"}}).status, 404);
  EXPECT_EQ(parse_embeddings_request("{", model, tok).index(), 1u);
}

TEST_F(EmbeddingsApi, NormalisedAndTruncated) {
  const std::vector<float> h = {3, 4, 12, 0, -5};
  const std::vector<float> all = normalized_embedding(h, 0);
  double sum = 0;
  for (float x : all) sum += double(x) * x;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR(all[2], 12 / std::sqrt(194.0), 1e-6);
  const std::vector<float> two = normalized_embedding(h, 2);  // Matryoshka: cut, then normalise
  ASSERT_EQ(two.size(), 2u);
  EXPECT_NEAR(two[0], 0.6, 1e-6);
  EXPECT_NEAR(two[1], 0.8, 1e-6);
  EXPECT_EQ(normalized_embedding(std::vector<float>{0, 0}, 0), (std::vector<float>{0, 0}));
}

TEST_F(EmbeddingsApi, Base64IsLittleEndianFloat32) {
  const std::vector<float> v = {0.6f, -0.8f, 1e-7f, 0.f, 3.25f};  // 20 bytes: padding "=="
  const json b = embedding_value(v, true);
  ASSERT_TRUE(b.is_string());
  EXPECT_EQ(b.get<std::string>().size(), 28u);
  EXPECT_EQ(floats_from_base64(b.get<std::string>()), v);
  for (size_t n = 1; n <= 3; ++n) {  // every padding length
    const std::vector<float> part(v.begin(), v.begin() + ptrdiff_t(n));
    EXPECT_EQ(floats_from_base64(embedding_value(part, true).get<std::string>()), part);
  }
  EXPECT_EQ(embedding_value(v, false), json(v));
}

TEST_F(EmbeddingsApi, ResponseShape) {
  const json j = embeddings_json({{1.f, 0.f}, {0.f, 1.f}}, false, "embedder", 7);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "embedder");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][1]["object"], "embedding");
  EXPECT_EQ(j["data"][1]["index"], 1);
  EXPECT_EQ(j["data"][1]["embedding"], json({0.f, 1.f}));
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 7}, {"total_tokens", 7}}));
}

TEST_F(EmbeddingsApi, EachKindOfModelKeepsToItsEndpoints) {
  EXPECT_FALSE(task_mismatch(model, "/v1/embeddings").has_value());
  for (const char* p : {"/v1/completions", "/v1/chat/completions", "/v1/responses"}) {
    auto e = task_mismatch(model, p);
    ASSERT_TRUE(e.has_value()) << p;
    EXPECT_EQ(e->status, 400);
    EXPECT_NE(e->message.find("is an embedding model"), std::string::npos) << e->message;
  }
  model.embedding_dimensions = 0;
  EXPECT_FALSE(task_mismatch(model, "/v1/completions").has_value());
  auto e = task_mismatch(model, "/v1/embeddings");
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->message.find("is a generation model"), std::string::npos) << e->message;
}

}  // namespace
}  // namespace flashserve
