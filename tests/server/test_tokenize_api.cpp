// POST /tokenize, /detokenize and GET /v1/models/{id} at the API edge (label unit): prompt and
// chat-message shapes, add_special_tokens, round trips, and the 400/404 for bad input. Fake
// byte-level tokenizer and the built-in ChatML template; no engine.
#include <gtest/gtest.h>

#include <memory>

#include "chat_template/chat_template.h"
#include "server/endpoints/tokenize.h"
#include "tests/server/api_result.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

class TokenizeApi : public testing::FakeModelTest<512> {
 protected:

  json ok(const JsonOrError& r) { return testing::accepted(r, "the request"); }
  ApiError err(const JsonOrError& r) {
    return testing::refused(r, std::holds_alternative<json>(r) ? std::get<json>(r).dump() : "");
  }
  json tokenize(const json& body) { return ok(tokenize_response(body.dump(), model, tok)); }
  json detokenize(const json& body) { return ok(detokenize_response(body.dump(), model, tok)); }
};

TEST_F(TokenizeApi, PromptRoundTrips) {
  const json t = tokenize({{"prompt", "Once upon"}, {"model", "stories"}});
  const std::vector<int32_t> ids = tok.encode("Once upon", /*add_bos=*/true);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(t["count"], ids.size());
  EXPECT_EQ(t["max_model_len"], 512);
  EXPECT_EQ(detokenize({{"tokens", t["tokens"]}})["prompt"], "Once upon");
  const json plain = tokenize({{"prompt", "Once upon"}, {"add_special_tokens", false}});
  EXPECT_EQ(plain["tokens"].get<std::vector<int32_t>>(), tok.encode("Once upon", false));
}

TEST_F(TokenizeApi, MessagesUseTheChatTemplate) {
  const json body = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}};
  EXPECT_EQ(err(tokenize_response(body.dump(), model, tok)).code, "chat_template_missing");
  model.chat_template =
      std::make_shared<ChatTemplate>(ChatTemplate::from_flag("chatml", "<s>", "</s>"));
  const json with_prompt = tokenize(body);
  EXPECT_EQ(tok.decode(with_prompt["tokens"].get<std::vector<int32_t>>()),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  json no_prompt = body;
  no_prompt["add_generation_prompt"] = false;
  EXPECT_EQ(tok.decode(tokenize(no_prompt)["tokens"].get<std::vector<int32_t>>()),
            "<|im_start|>user\nhi<|im_end|>\n");
  json parts = {{"messages", json::array({{{"role", "user"},
                                           {"content", json::array({{{"type", "text"},
                                                                     {"text", "hi"}}})}}})}};
  EXPECT_EQ(tokenize(parts)["tokens"], with_prompt["tokens"]);
}

TEST_F(TokenizeApi, BadInputIsA400NamingTheField) {
  auto tok_err = [&](const json& b) { return err(tokenize_response(b.dump(), model, tok)); };
  auto detok_err = [&](const json& b) { return err(detokenize_response(b.dump(), model, tok)); };
  EXPECT_EQ(tok_err({{"prompt", 5}}).param, "prompt");
  EXPECT_EQ(tok_err(json::object()).status, 400);
  EXPECT_EQ(tok_err({{"prompt", "a"}, {"messages", json::array()}}).status, 400);
  EXPECT_EQ(tok_err({{"prompt", "a"}, {"add_special_tokens", "yes"}}).status, 400);
  EXPECT_EQ(tok_err({{"prompt", "a"}, {"foo", 1}}).code, "unknown_parameter");
  EXPECT_EQ(tok_err({{"prompt", "a"}, {"model", "other"}}).status, 404);
  EXPECT_EQ(detok_err({{"tokens", {1, 262}}}).param, "tokens");
  EXPECT_EQ(detok_err({{"tokens", {1, -1}}}).status, 400);
  EXPECT_EQ(detok_err({{"tokens", {1, "a"}}}).status, 400);
  EXPECT_EQ(detok_err({{"tokens", "1"}}).status, 400);
  EXPECT_EQ(detok_err({{"prompt", "x"}}).status, 400);
}

TEST_F(TokenizeApi, ModelById) {
  const json m = ok(model_response("stories", model));
  EXPECT_EQ(m["id"], "stories");
  EXPECT_EQ(m["object"], "model");
  const ApiError e = err(model_response("gpt-4", model));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
}

}  // namespace
}  // namespace flashserve
