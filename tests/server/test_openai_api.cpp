// openai_api: request parsing/validation (every docs/API_CONTRACT.md field, each bad value -> its
// status and envelope) and the response/SSE builders. Uses a fake byte-level tokenizer; no engine.
#include <gtest/gtest.h>

#include <cmath>

#include "sampling/sampler.h"
#include "server/api/openai_api.h"
#include "server/endpoints/completions_request.h"
#include "tests/server/api_result.h"
#include "tests/server/fake_tokenizer.h"
#include "tests/server/shared_request_fields.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

class OpenAiApi : public testing::FakeModelTest<64> {
 protected:

  CompletionRequest ok(const std::string& body) {
    return testing::accepted(parse_completion_request(body, model, tok), body);
  }
  ApiError err(const std::string& body) {
    return testing::refused(parse_completion_request(body, model, tok), body);
  }
};

TEST_F(OpenAiApi, Defaults) {
  CompletionRequest r = ok(R"({"prompt":"ab"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], (std::vector<int32_t>{1, 3 + 'a', 3 + 'b'}));  // BOS first
  EXPECT_EQ(r.echo_texts[0], "ab");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.n, 1);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 1.f);
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_FALSE(r.has_seed);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_EQ(r.sampling.logprobs, -1);
}

TEST_F(OpenAiApi, EveryFieldIsRead) {
  json body = testing::shared_request_fields();
  body.update(json::parse(R"({"model":"stories","prompt":"x","max_tokens":5,"seed":-3,
      "logit_bias":{"5":-100,"4":2.5},"logprobs":3,"echo":true,"best_of":2,"suffix":null,
      "user":"u1","ignore_eos":true})"));
  CompletionRequest r = ok(body.dump());
  testing::expect_shared_request_fields(r);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_TRUE(r.has_seed);
  EXPECT_EQ(r.sampling.seed, static_cast<uint64_t>(-3));
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<int32_t, float>{4, 2.5f}));  // sorted by id
  EXPECT_EQ(r.sampling.logit_bias[1], (std::pair<int32_t, float>{5, -100.f}));
  EXPECT_EQ(r.logprobs, 3);
  EXPECT_EQ(r.sampling.logprobs, 3);
  EXPECT_TRUE(r.echo);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.user, "u1");
}

TEST_F(OpenAiApi, PromptForms) {
  EXPECT_EQ(ok(R"({"prompt":["a","b"]})").prompts.size(), 2u);
  CompletionRequest ids = ok(R"({"prompt":[1,5,9]})");
  ASSERT_EQ(ids.prompts.size(), 1u);
  EXPECT_EQ(ids.prompts[0], (std::vector<int32_t>{1, 5, 9}));  // ids are taken as given
  EXPECT_EQ(ids.echo_texts[0], tok.decode({1, 5, 9}));
  CompletionRequest lists = ok(R"({"prompt":[[1,5],[7]]})");
  ASSERT_EQ(lists.prompts.size(), 2u);
  EXPECT_EQ(lists.prompts[1], (std::vector<int32_t>{7}));
  EXPECT_EQ(ok(R"({"prompt":""})").prompts[0], (std::vector<int32_t>{1}));
}

TEST_F(OpenAiApi, TopKMinusOneIsOff) { EXPECT_EQ(ok(R"({"prompt":"a","top_k":-1})").sampling.top_k, 0); }

TEST_F(OpenAiApi, NullMeansDefault) {
  CompletionRequest r = ok(R"({"prompt":"a","max_tokens":null,"logprobs":null,"stop":null,
                              "seed":null,"stream":null})");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.logprobs, -1);
  EXPECT_FALSE(r.has_seed);
}

struct BadCase {
  const char* body;
  int status;
  const char* param;  // "" = null
  const char* code;   // "" = null
};

TEST_F(OpenAiApi, BadRequestsGetTheirStatusAndParam) {
  const BadCase cases[] = {
      {"{not json", 400, "", ""},
      {"[1,2]", 400, "", ""},
      {"\"prompt\"", 400, "", ""},
      {R"({})", 400, "prompt", ""},
      {R"({"prompt":null})", 400, "prompt", ""},
      {R"({"prompt":5})", 400, "prompt", ""},
      {R"({"prompt":[]})", 400, "prompt", ""},
      {R"({"prompt":[[]]})", 400, "prompt", ""},
      {R"({"prompt":["a",1]})", 400, "prompt", ""},
      {R"({"prompt":[1,-1]})", 400, "prompt", ""},
      {R"({"prompt":[1,262]})", 400, "prompt", ""},
      {R"({"prompt":[1,2.5]})", 400, "prompt", ""},
      {R"({"prompt":"\u00ff\u00ff"})", 200, "", ""},  // valid (UTF-8 of U+00FF): not an error
      {R"({"prompt":"a","model":"gpt-4"})", 404, "model", "model_not_found"},
      {R"({"prompt":"a","model":7})", 400, "model", ""},
      {R"({"prompt":"a","max_tokens":-1})", 400, "max_tokens", ""},
      {R"({"prompt":"a","max_tokens":"16"})", 400, "max_tokens", ""},
      {R"({"prompt":"a","max_tokens":16.0})", 400, "max_tokens", ""},
      {R"({"prompt":"a","max_tokens":true})", 400, "max_tokens", ""},
      {R"({"prompt":"a","max_tokens":100000000000000000000})", 400, "max_tokens", ""},
      {R"({"prompt":"a","max_tokens":18446744073709551615})", 400, "max_tokens",
       "context_length_exceeded"},
      {R"({"prompt":"a","max_tokens":9223372036854775807})", 400, "max_tokens",
       "context_length_exceeded"},
      {R"({"prompt":"a","max_tokens":63})", 400, "max_tokens", "context_length_exceeded"},
      {R"({"prompt":"a","max_tokens":2147483647})", 400, "max_tokens", "context_length_exceeded"},
      {R"({"prompt":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"})", 400,
       "prompt", "context_length_exceeded"},
      {R"({"prompt":"a","temperature":-0.1})", 400, "temperature", ""},
      {R"({"prompt":"a","temperature":2.5})", 400, "temperature", ""},
      {R"({"prompt":"a","temperature":"hot"})", 400, "temperature", ""},
      {R"({"prompt":"a","top_p":0})", 400, "top_p", ""},
      {R"({"prompt":"a","top_p":1.5})", 400, "top_p", ""},
      {R"({"prompt":"a","top_k":-2})", 400, "top_k", ""},
      {R"({"prompt":"a","top_k":1.5})", 400, "top_k", ""},
      {R"({"prompt":"a","min_p":1.1})", 400, "min_p", ""},
      {R"({"prompt":"a","n":0})", 400, "n", ""},
      {R"({"prompt":"a","n":1000})", 400, "n", ""},
      {R"({"prompt":["a","b","c"],"n":100})", 400, "n", ""},
      {R"({"prompt":"a","stop":5})", 400, "stop", ""},
      {R"({"prompt":"a","stop":[""]})", 400, "stop", ""},
      {R"({"prompt":"a","stop":["a",3]})", 400, "stop", ""},
      {R"({"prompt":"a","stream":"yes"})", 400, "stream", ""},
      {R"({"prompt":"a","stream_options":{"include_usage":true}})", 400, "stream_options", ""},
      {R"({"prompt":"a","stream":true,"stream_options":{"x":1}})", 400, "stream_options",
       "unknown_parameter"},
      {R"({"prompt":"a","stream":true,"stream_options":[]})", 400, "stream_options", ""},
      {R"({"prompt":"a","seed":1.5})", 400, "seed", ""},
      {R"({"prompt":"a","seed":"1"})", 400, "seed", ""},
      {R"({"prompt":"a","presence_penalty":3})", 400, "presence_penalty", ""},
      {R"({"prompt":"a","frequency_penalty":-2.01})", 400, "frequency_penalty", ""},
      {R"({"prompt":"a","repetition_penalty":0})", 400, "repetition_penalty", ""},
      // In range as doubles, out of range as the floats the sampler uses (0 or inf).
      {R"({"prompt":"a","top_p":1e-50})", 400, "top_p", ""},
      {R"({"prompt":"a","top_p":1e-46})", 400, "top_p", ""},
      {R"({"prompt":"a","repetition_penalty":1e300})", 400, "repetition_penalty", ""},
      {R"({"prompt":"a","repetition_penalty":3.5e38})", 400, "repetition_penalty", ""},
      {R"({"prompt":"a","repetition_penalty":1e-50})", 400, "repetition_penalty", ""},
      // ...while these stay in range as floats (0 is a valid temperature/min_p/penalty).
      {R"({"prompt":"a","temperature":1e-50})", 200, "", ""},
      {R"({"prompt":"a","min_p":1e-50})", 200, "", ""},
      {R"({"prompt":"a","presence_penalty":-1e-50,"frequency_penalty":1e-50})", 200, "", ""},
      {R"({"prompt":"a","repetition_penalty":3.4e38,"top_p":1e-40})", 200, "", ""},
      {R"({"prompt":"a","logit_bias":{"5":1e-50,"6":-99.99999999999999}})", 200, "", ""},
      {R"({"prompt":"a","logit_bias":{"x":1}})", 400, "logit_bias", ""},
      {R"({"prompt":"a","logit_bias":{"999":1}})", 400, "logit_bias", ""},
      {R"({"prompt":"a","logit_bias":{"5":101}})", 400, "logit_bias", ""},
      {R"({"prompt":"a","logit_bias":{"-5":1}})", 400, "logit_bias", ""},
      {R"({"prompt":"a","logit_bias":[1]})", 400, "logit_bias", ""},
      {R"({"prompt":"a","logprobs":6})", 400, "logprobs", ""},
      {R"({"prompt":"a","logprobs":true})", 400, "logprobs", ""},
      {R"({"prompt":"a","echo":1})", 400, "echo", ""},
      {R"({"prompt":"a","best_of":3})", 400, "best_of", "unsupported_parameter"},
      {R"({"prompt":"a","suffix":"end"})", 400, "suffix", "unsupported_parameter"},
      {R"({"prompt":"a","user":5})", 400, "user", ""},
      {R"({"prompt":"a","ignore_eos":"no"})", 400, "ignore_eos", ""},
      {R"({"prompt":"a","functions":[]})", 400, "functions", "unknown_parameter"},
      {R"({"prompt":"a","max_token":5})", 400, "max_token", "unknown_parameter"},
  };
  for (const auto& c : cases) {
    auto r = parse_completion_request(c.body, model, tok);
    if (c.status == 200) {
      EXPECT_TRUE(std::holds_alternative<CompletionRequest>(r)) << c.body;
      continue;
    }
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << c.body << " was accepted";
    const ApiError& e = std::get<ApiError>(r);
    EXPECT_EQ(e.status, c.status) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body;
    EXPECT_FALSE(e.message.empty()) << c.body;
    json j = error_json(e);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << c.body;
    EXPECT_TRUE(j["error"]["param"].is_null() == (c.param[0] == 0)) << c.body;
  }
}

// Whatever the parser accepts, the engine's sampler accepts too (a float that rounded out of
// range there would fail the request with a 500): bodies near every float parameter's limits.
TEST_F(OpenAiApi, AcceptedSamplingParamsPassTheSamplerCheck) {
  const char* fields[] = {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                          "repetition_penalty"};
  const char* values[] = {"0", "-0.0", "1e-50", "1e-46", "1e-45", "1e-40", "1.17549435e-38",
                          "0.9999999999", "1", "1.0000000001", "1.9999999999", "2", "-2",
                          "-1.9999999999", "3.4028234e38", "3.4028236e38", "1e39", "1e300",
                          "-1e-50", "5e-324"};
  int accepted = 0, refused = 0;
  for (const char* f : fields) {
    for (const char* v : values) {
      const std::string body = std::string(R"({"prompt":"a",")") + f + "\":" + v + "}";
      auto r = parse_completion_request(body, model, tok);
      if (auto* e = std::get_if<ApiError>(&r)) {
        EXPECT_EQ(e->status, 400) << body;
        EXPECT_EQ(e->param, f) << body;
        ++refused;
        continue;
      }
      ++accepted;
      const SamplingParams& s = std::get<CompletionRequest>(r).sampling;
      EXPECT_NO_THROW(validate_sampling(s, model.vocab_size)) << body;
    }
  }
  for (const char* v : values) {  // logit_bias values: [-100, 100] as floats
    auto r = parse_completion_request(std::string(R"({"prompt":"a","logit_bias":{"5":)") + v + "}}",
                                      model, tok);
    if (auto* req = std::get_if<CompletionRequest>(&r)) {
      EXPECT_LE(std::fabs(req->sampling.logit_bias.at(0).second), 100.f) << v;
    }
  }
  EXPECT_GT(accepted, 30);
  EXPECT_GT(refused, 30);
}

TEST_F(OpenAiApi, HostileNestingIsRefusedWithoutParsing) {
  std::string deep(200000, '[');
  EXPECT_EQ(err(R"({"prompt":)" + deep).status, 400);
  // Brackets inside strings do not count.
  EXPECT_EQ(ok(R"({"prompt":")" + std::string(40, '[') + R"(","max_tokens":1})").prompts[0].size(),
            41u);
}

TEST_F(OpenAiApi, ErrorEnvelope) {
  ApiError e = bad_request("msg", "max_tokens", "c");
  json j = error_json(e);
  EXPECT_EQ(j, json::parse(R"({"error":{"message":"msg","type":"invalid_request_error",
                                         "param":"max_tokens","code":"c"}})"));
  EXPECT_EQ(error_json(bad_request("m"))["error"]["code"], nullptr);
}

TEST_F(OpenAiApi, TokenTextForLogprobs) {
  EXPECT_EQ(token_text(tok, 259), " Once");          // "▁" -> space
  EXPECT_EQ(token_text(tok, 3 + 'a'), "a");          // byte piece -> its byte
  EXPECT_EQ(token_text(tok, 3 + 0xE2), "bytes:\\xe2");  // lone lead byte: not UTF-8
  EXPECT_EQ(token_text(tok, 1), "<s>");
}

// A model with more rows than its tokenizer has tokens (as Qwen 2.5's 151936 for 151665): prompt
// ids are checked against the model's vocabulary, and ids past the tokenizer's decode to nothing
// in echo and have "" as their logprobs text, as vLLM gives.
TEST(OpenAiApiPaddedVocab, PaddingIdsAcceptedEmptyInEchoAndLogprobs) {
  const auto sp = Tokenizer::load(std::string(FS_MODELS_DIR) + "/stories260K/tok512.model");
  ASSERT_EQ(sp->vocab_size(), 512);
  const ServedModel padded{"stories", 64, 520, 1700000000};
  auto r = parse_completion_request(R"({"prompt":[1,515,259,519],"echo":true})", padded, *sp);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<CompletionRequest>(r).prompts[0], (std::vector<int32_t>{1, 515, 259, 519}));
  EXPECT_EQ(std::get<CompletionRequest>(r).echo_texts[0], sp->decode({1, 259}));
  EXPECT_FALSE(sp->decode({1, 259}).empty());
  auto bad = parse_completion_request(R"({"prompt":[1,520]})", padded, *sp);
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
  EXPECT_EQ(std::get<ApiError>(bad).status, 400);
  EXPECT_EQ(token_text(*sp, 515), "");
  EXPECT_EQ(token_text(*sp, 259), " " + sp->decode({259}));  // "▁t": a real token is not ""
}

TEST_F(OpenAiApi, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8("abc \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  // Truncated, overlong, a lone continuation byte, past U+10FFFF.
  for (const char* bad : {"\xE2\x82", "\xC0\x80", "\x80", "\xF5\x80\x80\x80"})
    EXPECT_FALSE(is_valid_utf8(bad)) << ::testing::PrintToString(std::string(bad));
}

TEST_F(OpenAiApi, LogprobsShape) {
  LogprobsAccumulator acc;
  SampledToken first{3 + 'a', std::nanf(""), {}};
  SampledToken second{259, -0.5f, {{259, -0.5f}, {3 + 'b', -1.25f}}};
  acc.add(tok, first, 0, true);
  acc.add(tok, second, 1, true);
  json j = acc.to_json();
  EXPECT_EQ(j["tokens"], json::parse(R"(["a"," Once"])"));
  EXPECT_EQ(j["token_logprobs"][0], nullptr);
  EXPECT_DOUBLE_EQ(j["token_logprobs"][1].get<double>(), -0.5);
  EXPECT_EQ(j["top_logprobs"][0], nullptr);
  EXPECT_DOUBLE_EQ(j["top_logprobs"][1]["b"].get<double>(), -1.25);
  EXPECT_EQ(j["text_offset"], json::parse("[0,1]"));
}

TEST_F(OpenAiApi, CacheSaltAndTenants) {
  EXPECT_EQ(ok(R"({"prompt":"a"})").cache_salt, "");
  EXPECT_EQ(ok(R"({"prompt":"a","cache_salt":"team-7"})").cache_salt, "team-7");
  EXPECT_EQ(err(R"({"prompt":"a","cache_salt":7})").param, "cache_salt");
  EXPECT_EQ(err("{\"prompt\":\"a\",\"cache_salt\":\"" + std::string(kMaxCacheSaltBytes + 1, 'x') +
                "\"}").param,
            "cache_salt");
  // (key, salt) pairs that concatenate alike still give different engine salts.
  EXPECT_NE(tenant_cache_salt("ab", "c"), tenant_cache_salt("a", "bc"));
  EXPECT_NE(tenant_cache_salt("", "1:x"), tenant_cache_salt("x", ""));
  EXPECT_EQ(tenant_cache_salt("k", "s"), tenant_cache_salt("k", "s"));
  json u = usage_json({10, 2, 8});
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 8);
  EXPECT_EQ(u["total_tokens"], 12);
}

TEST_F(OpenAiApi, ResponseShapes) {
  json choices = json::array({choice_json(0, "hi", nullptr, "length")});
  json r = completion_json("cmpl-1", 5, "stories", choices, usage_json({3, 2}));
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
  json chunk = completion_json("cmpl-1", 5, "stories",
                               json::array({choice_json(0, "x", nullptr, "")}), nullptr);
  EXPECT_FALSE(chunk.contains("usage"));
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], nullptr);
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  // Invalid UTF-8 never throws: it is replaced.
  EXPECT_NO_THROW(dump_json(json{{"t", std::string("\xE2\x82")}}));
  json models = models_json(model);
  EXPECT_EQ(models["data"][0]["id"], "stories");
  EXPECT_EQ(models["data"][0]["max_model_len"], 64);
}

}  // namespace
}  // namespace flashserve
