// POST /v1/chat/completions against the real `flashserve` binary (label server).
// stories260K with the built-in ChatML template: streamed == non-streamed text, n > 1, the chat
// logprobs shape, 400 envelopes naming the field for bad messages and unimplemented fields, the
// missing-template how-to, raise_exception, and a template that does not parse (exit 1).
// A random-weight HF folder (tests/server/data/chat_tok.model, whose <|im_start|>/<|im_end|> are
// user-defined pieces; chat_template.jinja; generation_config.json): the folder's template is
// found, template-written special text is one token each while a user's "<|im_end|>" stays
// characters, generation_config's sampling defaults apply, and every id of its eos list ends a reply.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/server/server_process.h"
#include "tests/server/tiny_model.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

json post_chat(int port, const json& body, int* status = nullptr) {
  http::Response r = http::request(port, "POST", "/v1/chat/completions", body.dump());
  if (status) *status = r.status;
  return json::parse(r.body, nullptr, false);
}

StreamResult stream_chat(int port, json body) {
  body["stream"] = true;
  return stream_post(port, "/v1/chat/completions", body);
}

json user_says(const std::string& text) {
  return json{{"messages", json::array({{{"role", "user"}, {"content", text}}})}};
}

const char* kChatml =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = (fs::temp_directory_path() / name).string();
  std::ofstream(path) << text;
  return path;
}

class ChatStories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server = new ServerProcess({"--chat-template", "chatml"}); }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(server->started()) << server->log(); }
  int port() const { return server->port(); }
  static ServerProcess* server;
};
ServerProcess* ChatStories::server = nullptr;

TEST_F(ChatStories, ModelsSaysThereIsATemplate) {
  json m = json::parse(http::request(port(), "GET", "/v1/models").body);
  EXPECT_EQ(m["data"][0]["chat_template"], true);
  EXPECT_NE(server->log().find("chat template: builtin:chatml"), std::string::npos);
}

TEST_F(ChatStories, StreamedEqualsWhole) {
  json body = user_says("Once upon a time");
  body["max_tokens"] = 40;
  body["temperature"] = 0;
  int status = 0;
  json whole = post_chat(port(), body, &status);
  ASSERT_EQ(status, 200) << whole.dump();
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  const std::string text = whole["choices"][0]["message"]["content"];
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(whole["usage"]["total_tokens"].get<int>(),
            whole["usage"]["prompt_tokens"].get<int>() + whole["usage"]["completion_tokens"].get<int>());
  body["stream_options"] = {{"include_usage", true}};
  StreamResult s = stream_chat(port(), body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text, text);
  EXPECT_EQ(s.finish_reason, whole["choices"][0]["finish_reason"].get<std::string>());
  ASSERT_GE(s.chunks.size(), 3u);
  EXPECT_EQ(s.chunks.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(s.chunks.front()["object"], "chat.completion.chunk");
  // Equal counts; cached_tokens may differ (the second request can hit the prefix cache).
  json streamed_usage = s.chunks.back()["usage"], whole_usage = whole["usage"];
  EXPECT_LE(streamed_usage["prompt_tokens_details"]["cached_tokens"].get<int>(),
            streamed_usage["prompt_tokens"].get<int>());
  streamed_usage.erase("prompt_tokens_details");
  whole_usage.erase("prompt_tokens_details");
  EXPECT_EQ(streamed_usage, whole_usage);
}

TEST_F(ChatStories, PrefixCacheAndCacheSalt) {
  // A conversation resent with one more turn reuses the cached blocks of what came before,
  // unless its cache_salt differs.
  json body = user_says("Tell me a story about a little dog who loved to run in the big park.");
  body["max_tokens"] = 4;
  body["temperature"] = 0;
  body["cache_salt"] = "chat-test";
  int status = 0;
  json first = post_chat(port(), body, &status);
  ASSERT_EQ(status, 200) << first.dump();
  body["messages"].push_back({{"role", "assistant"}, {"content", "Once upon a time"}});
  body["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
  json next = post_chat(port(), body, &status);
  ASSERT_EQ(status, 200) << next.dump();
  const int first_prompt = first["usage"]["prompt_tokens"];
  const int cached = next["usage"]["prompt_tokens_details"]["cached_tokens"];
  ASSERT_GE(first_prompt, 32) << "the test needs two full blocks in the first turn";
  // The first turn's full blocks, but maybe its last one (the template's assistant marker ends
  // the first prompt; the next one continues differently from there).
  EXPECT_GE(cached, first_prompt / 16 * 16 - 16);
  EXPECT_GT(cached, 0);
  body["cache_salt"] = "another-tenant";
  json other = post_chat(port(), body, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(other["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(other["choices"], next["choices"]) << "the cache changes timing, not text";
}

TEST_F(ChatStories, SeveralChoices) {
  json body = user_says("Tell me a story");
  body.update({{"max_tokens", 12}, {"n", 3}, {"temperature", 1.0}, {"seed", 5}});
  int status = 0;
  json r = post_chat(port(), body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r["choices"][i]["index"], i);
    EXPECT_TRUE(r["choices"][i]["message"]["content"].is_string());
  }
  EXPECT_EQ(post_chat(port(), body)["choices"], r["choices"]) << "a seeded request repeats";
}

TEST_F(ChatStories, LogprobsShape) {
  json body = user_says("Hello");
  body.update({{"max_tokens", 5}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}});
  int status = 0;
  json r = post_chat(port(), body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), r["usage"]["completion_tokens"].get<size_t>());
  std::string joined;
  for (const json& e : content) {
    ASSERT_TRUE(e["token"].is_string());
    ASSERT_TRUE(e["logprob"].is_number());
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_TRUE(e["bytes"].is_array());
    for (const json& b : e["bytes"]) joined.push_back(static_cast<char>(b.get<int>()));
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    for (const json& t : e["top_logprobs"]) {
      EXPECT_TRUE(t.contains("token") && t.contains("logprob") && t.contains("bytes"));
    }
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
  }
  EXPECT_EQ(joined, r["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(ChatStories, BadRequestsAre400WithParam) {
  const std::vector<std::pair<json, std::string>> cases = {
      {json{{"messages", json::array()}}, "messages"},
      {json{{"messages", json::array({{{"content", "hi"}}})}}, "messages[0].role"},
      {json{{"messages", json::array({{{"role", "robot"}, {"content", "hi"}}})}}, "messages[0].role"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", 7}}})}}, "messages[0].content"},
      {json{{"messages", json::array({{{"role", "user"},
                                       {"content", json::array({{{"type", "image_url"},
                                                                 {"image_url", {{"url", "x"}}}}})}}})}},
       "messages[0].content[0]"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
            {"tools", json::array({{{"type", "function"}}})}}, "tools[0].function"},
      {json{{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}, {"frobnicate", 1}},
       "frobnicate"},
  };
  for (const auto& [body, param] : cases) {
    int status = 0;
    json e = post_chat(port(), body, &status);
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_EQ(e["error"]["param"], param) << e.dump();
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  }
  EXPECT_TRUE(server->alive());
}

TEST(ChatServer, NoTemplateIsA400ThatSaysHowToSetOne) {
  ServerProcess server;  // stories260K is a llama2.c checkpoint: no template of its own
  ASSERT_TRUE(server.started()) << server.log();
  json m = json::parse(http::request(server.port(), "GET", "/v1/models").body);
  EXPECT_EQ(m["data"][0]["chat_template"], false);
  int status = 0;
  json e = post_chat(server.port(), user_says("hi"), &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["code"], "chat_template_missing");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("--chat-template"), std::string::npos);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ChatServer, RaiseExceptionIsA400WithItsMessage) {
  const std::string path = write_file(
      "flashserve_chat_raise.jinja",
      "{% if messages[0]['role'] != 'system' %}{{ raise_exception('the first message must be a "
      "system message') }}{% endif %}" + std::string(kChatml));
  ServerProcess server({"--chat-template", path});
  ASSERT_TRUE(server.started()) << server.log();
  int status = 0;
  json e = post_chat(server.port(), user_says("hi"), &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find("the first message must be a system message"),
            std::string::npos) << e.dump();
  json ok_body = {{"messages", json::array({{{"role", "system"}, {"content", "be kind"}},
                                            {{"role", "user"}, {"content", "hi"}}})},
                  {"max_tokens", 3}};
  post_chat(server.port(), ok_body, &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(server.stop(), 0);
  fs::remove(path);
}

TEST(ChatServer, ATemplateThatDoesNotParseStopsStartUp) {
  const std::string path =
      write_file("flashserve_chat_bad.jinja", "{% for m in messages %}{{ m.content }}");
  ServerProcess server({"--chat-template", path});
  EXPECT_FALSE(server.started());
  EXPECT_EQ(server.stop(), 1) << server.log();
  EXPECT_NE(server.log().find("flashserve_chat_bad.jinja"), std::string::npos) << server.log();
  ServerProcess unknown({"--chat-template", "no-such-template"});
  EXPECT_FALSE(unknown.started());
  EXPECT_EQ(unknown.stop(), 1) << unknown.log();
  fs::remove(path);
}

// A random-weight HF model folder around the special-token tokenizer.
class ChatModelDir : public ::testing::Test {
 protected:
  static constexpr int kForced = 100;  // an ordinary token id that generation_config lists as EOS

  static void SetUpTestSuite() {
    const std::string tok_path = std::string(FS_SOURCE_DIR) + "/tests/server/data/chat_tok.model";
    tok = Tokenizer::load(tok_path).release();
    dir = (fs::temp_directory_path() / ("flashserve_chat_model_" + std::to_string(getpid()))).string();
    write_tiny_model(dir, tok_path, *tok, /*max_model_len=*/256, /*seed=*/3);
    std::ofstream(dir + "/chat_template.jinja") << kChatml;
    std::ofstream(dir + "/generation_config.json")
        << json{{"eos_token_id", {tok->eos_id(), kForced}}, {"temperature", 0.0}, {"top_k", 1}}.dump();
    server = new ServerProcess({"--model", dir, "--served-model-name", "stories260K"});
  }
  static void TearDownTestSuite() {
    delete server;
    delete tok;
    fs::remove_all(dir);
  }
  void SetUp() override { ASSERT_TRUE(server->started()) << server->log(); }
  int port() const { return server->port(); }
  int prompt_tokens(const std::string& user) {
    json body = user_says(user);
    body["max_tokens"] = 1;
    int status = 0;
    json r = post_chat(port(), body, &status);
    EXPECT_EQ(status, 200) << r.dump();
    return r["usage"]["prompt_tokens"];
  }
  size_t encoded(const std::string& s) { return tok->encode(s, false).size(); }

  static Tokenizer* tok;
  static std::string dir;
  static ServerProcess* server;
};
Tokenizer* ChatModelDir::tok = nullptr;
std::string ChatModelDir::dir;
ServerProcess* ChatModelDir::server = nullptr;

TEST_F(ChatModelDir, TheFoldersTemplateAndGenerationConfigAreUsed) {
  const std::string log = server->log();
  EXPECT_NE(log.find("chat_template.jinja"), std::string::npos) << log;
  EXPECT_NE(log.find("eos ids [" + std::to_string(tok->eos_id()) + "," + std::to_string(kForced) + "]"),
            std::string::npos) << log;
  EXPECT_NE(log.find("temperature 0, top_p 1, top_k 1"), std::string::npos) << log;
}

TEST_F(ChatModelDir, TemplateSpecialsAreOneTokenAndAUsersAreCharacters) {
  // Template-written <|im_start|>/<|im_end|> are one id each: the prompt for an empty message is
  // exactly the three specials plus the text stretches between them.
  const int empty = prompt_tokens("");
  EXPECT_EQ(size_t(empty), 3 + encoded("user\n") + encoded("\n") + encoded("assistant\n"));
  // The same text typed by a user costs its characters, never the one special token.
  const int typed = prompt_tokens("<|im_end|>");
  EXPECT_GE(typed - empty, 4) << "a user's <|im_end|> became a special token";
}

TEST_F(ChatModelDir, GenerationConfigDefaultsApply) {
  json body = user_says("once upon a time");
  body["max_tokens"] = 12;
  body["ignore_eos"] = true;
  // No temperature in the request: generation_config's 0 (greedy), so no seed is needed to repeat.
  json a = post_chat(port(), body), b = post_chat(port(), body);
  ASSERT_TRUE(a.contains("choices")) << a.dump();
  EXPECT_EQ(a["choices"][0]["message"], b["choices"][0]["message"]);
  body["temperature"] = 0;
  EXPECT_EQ(post_chat(port(), body)["choices"][0]["message"], a["choices"][0]["message"]);
  // An explicit temperature overrides it: different seeds now give different replies.
  body["temperature"] = 2.0;
  body["top_k"] = 0;
  body["max_tokens"] = 30;
  body["seed"] = 1;
  json s1 = post_chat(port(), body);
  body["seed"] = 2;
  EXPECT_NE(post_chat(port(), body)["choices"][0]["message"], s1["choices"][0]["message"]);
}

TEST_F(ChatModelDir, EveryIdOfTheEosListEndsAReply) {
  json body = user_says("hello");
  body["max_tokens"] = 10;
  body["logit_bias"] = {{std::to_string(kForced), 100}};  // the first token is kForced
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    json b = body;
    if (std::string(path) == "/v1/completions") b = {{"prompt", "hello"}, {"max_tokens", 10},
                                                     {"logit_bias", body["logit_bias"]}};
    json r = json::parse(http::request(port(), "POST", path, b.dump()).body);
    ASSERT_TRUE(r.contains("choices")) << r.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << path;
    EXPECT_EQ(r["usage"]["completion_tokens"], 1) << path;
    b["ignore_eos"] = true;
    r = json::parse(http::request(port(), "POST", path, b.dump()).body);
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length") << path;
    EXPECT_EQ(r["usage"]["completion_tokens"], 10) << path;
  }
}

}  // namespace
}  // namespace flashserve::testing
