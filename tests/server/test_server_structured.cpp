// Structured outputs and tool calls through the real `flashserve` binary (label server), on
// stories260K (ChatML, 512 tokens) and on a random-weight model with the Llama 2 tokenizer (32000
// tokens): every json_schema output that finishes with "stop" validates with python3-jsonschema
// (tests/server/check_json_schema.py), streamed and whole outputs are equal for the same seed,
// tool_choice "required" / named yields a call whose arguments validate against the function's
// parameters, and the streamed tool_calls deltas reassemble to the whole message.
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

// Sizes are bounded so that a sampled output can finish within max_tokens.
const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},
        "age":{"type":"integer","minimum":0,"maximum":120},"pet":{"enum":["cat","dog",null]}},
        "required":["name","age"]})",
    R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":4})",
    R"({"anyOf":[{"type":"integer","minimum":-99,"maximum":99},{"type":"string","pattern":"^[a-z]{1,5}$"}]})",
    R"({"type":"object","properties":{"when":{"type":"string","format":"date"},
        "id":{"type":"string","format":"uuid"}},"required":["when","id"],"additionalProperties":false})",
    R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},
        "next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},"required":["v","next"]}},
        "$ref":"#/$defs/n"})",
    R"({"type":"number","minimum":-5,"maximum":5})",
};

const json kTools = json::parse(R"([
  {"type":"function","function":{"name":"get_weather","description":"Weather of a city",
   "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":10},
   "days":{"type":"integer","minimum":1,"maximum":7},"unit":{"enum":["C","F"]}},
   "required":["city","days"]}}},
  {"type":"function","function":{"name":"get_time","parameters":{"type":"object",
   "properties":{}}}}])");
// stories260K's context is 512 tokens and its vocabulary spends about one a character: small tools.
const json kSmallTools = json::parse(R"([
  {"type":"function","function":{"name":"go","parameters":{"type":"object",
   "properties":{"n":{"type":"integer","minimum":1,"maximum":7}},"required":["n"]}}},
  {"type":"function","function":{"name":"stop"}}])");

json post(int port, const std::string& path, const json& body, int* status) {
  http::Response r = http::request(port, "POST", path, body.dump());
  *status = r.status;
  return json::parse(r.body, nullptr, false);
}

// Validates {"schema", "instance"} cases with python3-jsonschema; skips when it is missing.
void expect_valid(const std::vector<json>& cases) {
  if (cases.empty()) return;
  const std::string path = ::testing::TempDir() + "/flashserve_schema_cases_" +
                           std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream f(path);
    for (const json& c : cases) f << c.dump() << "\n";
  }
  const std::string cmd = "python3 " + std::string(FS_SOURCE_DIR) +
                          "/tests/server/check_json_schema.py " + path + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = WEXITSTATUS(pclose(p));
  fs::remove(path);
  if (rc == 77) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out;
}

json chat_body(const json& extra) {
  json b = {{"messages", json::array({{{"role", "user"}, {"content", "Give me the data."}}})},
            {"temperature", 1.0}, {"max_tokens", 160}};
  b.update(extra);
  return b;
}

// Streams a chat request and joins its deltas into a message: content, and tool_calls[index]
// from their id/name piece and argument fragments.
json streamed_message(int port, json body, std::string* finish_reason) {
  body["stream"] = true;
  StreamResult s = stream_post(port, "/v1/chat/completions", body);
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  json calls = json::array();
  for (const json& chunk : s.chunks) {
    for (const json& c : chunk.value("choices", json::array())) {
      for (const json& t : c["delta"].value("tool_calls", json::array())) {
        const size_t i = t["index"];
        if (t.contains("id")) {
          EXPECT_EQ(i, calls.size()) << chunk.dump();
          calls.push_back({{"id", t["id"]}, {"type", t["type"]}, {"function", t["function"]}});
        } else if (i < calls.size()) {
          std::string& a = calls[i]["function"]["arguments"].get_ref<std::string&>();
          a += t["function"]["arguments"].get<std::string>();
        } else {
          ADD_FAILURE() << "arguments before the call's first piece: " << chunk.dump();
        }
      }
    }
  }
  *finish_reason = s.finish_reason;
  json m = {{"role", "assistant"}, {"content", s.text}};
  if (!calls.empty()) {
    m["tool_calls"] = calls;
    if (s.text.empty()) m["content"] = nullptr;
  }
  return m;
}

// Every json_schema output that stops validates; streamed == whole for the same seed.
void check_json_schemas(int port, int seeds) {
  std::vector<json> cases;
  int stopped = 0, total = 0;
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    for (int seed = 1; seed <= seeds; ++seed) {
      const bool chat = seed % 2 == 1;
      json body = {{"temperature", 1.0}, {"max_tokens", 160}, {"seed", seed},
                   {"response_format", {{"type", "json_schema"},
                                        {"json_schema", {{"name", "t"}, {"schema", schema}}}}}};
      if (chat) body = chat_body(body);
      else body["prompt"] = "Once upon a time";
      const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
      int status = 0;
      json r = post(port, path, body, &status);
      ASSERT_EQ(status, 200) << r.dump();
      const json& c = r["choices"][0];
      const std::string out = chat ? c["message"]["content"] : c["text"];
      ++total;
      if (c["finish_reason"] == "stop") {
        ++stopped;
        cases.push_back({{"schema", schema}, {"instance", out}});
      }
      body["stream"] = true;
      StreamResult s = stream_post(port, path, body);
      EXPECT_EQ(s.text, out) << text;
      EXPECT_EQ(s.finish_reason, c["finish_reason"].get<std::string>());
    }
  }
  EXPECT_GE(stopped * 3, total) << "too few outputs finished to check them";
  expect_valid(cases);
}

// tool_choice required / named: a call whose arguments validate; streamed deltas reassemble.
void check_forced_tool_calls(int port, const json& tools, int seeds, int max_tokens) {
  const std::string first = tools[0]["function"]["name"];
  std::vector<json> cases;
  for (int seed = 1; seed <= seeds; ++seed) {
    json choice = seed % 2 == 1 ? json("required")
                                : json{{"type", "function"}, {"function", {{"name", first}}}};
    json body = chat_body({{"tools", tools}, {"tool_choice", choice}, {"seed", seed},
                           {"max_tokens", max_tokens}});
    int status = 0;
    json r = post(port, "/v1/chat/completions", body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    const json& c = r["choices"][0];
    const json& m = c["message"];
    if (c["finish_reason"] == "length") continue;  // cut short: nothing to check
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    ASSERT_TRUE(m.contains("tool_calls")) << r.dump();
    ASSERT_GE(m["tool_calls"].size(), 1u);
    for (const json& call : m["tool_calls"]) {
      EXPECT_EQ(call["type"], "function");
      EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
      const std::string name = call["function"]["name"];
      if (!choice.is_string()) EXPECT_EQ(name, first);
      json params = {{"type", "object"}};
      for (const json& t : tools) {
        if (t["function"]["name"] == name) params = t["function"].value("parameters", params);
      }
      cases.push_back({{"schema", params}, {"instance", call["function"]["arguments"]}});
    }
    std::string reason;
    json streamed = streamed_message(port, body, &reason);
    EXPECT_EQ(reason, c["finish_reason"].get<std::string>());
    json whole = m;
    for (json* msg : {&whole, &streamed}) {
      for (json& call : (*msg)["tool_calls"]) call.erase("id");  // each request draws its own
    }
    EXPECT_EQ(streamed, whole);
  }
  expect_valid(cases);
}

// stories260K with ChatML, started once for the suite (stopped when the program exits).
class StructuredStories : public ::testing::Test {
 protected:
  void SetUp() override {
    static ServerProcess stories({"--chat-template", "chatml"});
    server = &stories;
    ASSERT_TRUE(server->started()) << server->log();
  }
  ServerProcess* server = nullptr;
};

TEST_F(StructuredStories, JsonSchemaOutputsValidateAndStreamAlike) {
  check_json_schemas(server->port(), 4);
}

TEST_F(StructuredStories, ForcedToolCallsAreValid) {
  check_forced_tool_calls(server->port(), kSmallTools, 4, 100);
}

TEST_F(StructuredStories, OtherConstraintsAndAutoTools) {
  int status = 0;
  json r = post(server->port(), "/v1/chat/completions",
                chat_body({{"guided_choice", {"yes", "no"}}, {"seed", 3}}), &status);
  ASSERT_EQ(status, 200) << r.dump();
  const std::string answer = r["choices"][0]["message"]["content"];
  EXPECT_TRUE(answer == "yes" || answer == "no") << answer;
  r = post(server->port(), "/v1/completions",
           {{"prompt", "x"}, {"guided_regex", "[0-9]{3}-[a-c]+"}, {"max_tokens", 30}, {"seed", 1}},
           &status);
  ASSERT_EQ(status, 200) << r.dump();
  if (r["choices"][0]["finish_reason"] == "stop") {
    const std::string t = r["choices"][0]["text"];
    EXPECT_TRUE(t.size() >= 5 && t[3] == '-') << t;
  }
  r = post(server->port(), "/v1/chat/completions", chat_body({{"tools", kSmallTools}, {"max_tokens", 20}}),
           &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
}

TEST_F(StructuredStories, BadConstraintsAre400s) {
  const std::vector<std::pair<json, std::string>> cases = {
      {chat_body({{"response_format", {{"type", "json_schema"}, {"json_schema",
          {{"name", "x"}, {"strict", true}, {"schema", {{"type", "object"}, {"not", {{"required", {"b"}}}}}}}}}}}),
       "response_format.json_schema.schema"},
      {chat_body({{"tools", kTools}, {"tool_choice", {{"type", "function"},
                                                     {"function", {{"name", "nope"}}}}}}),
       "tool_choice"},
      {chat_body({{"messages", {{{"role", "tool"}, {"content", "x"}}}}}), "messages[0].tool_call_id"},
  };
  for (const auto& [body, param] : cases) {
    int status = 0;
    json e = post(server->port(), "/v1/chat/completions", body, &status);
    EXPECT_EQ(status, 400) << body.dump();
    EXPECT_EQ(e["error"]["param"], param) << e.dump();
  }
  EXPECT_TRUE(server->alive());
}

// A random-weight model with the Llama 2 tokenizer: a 32000-token vocabulary of SentencePiece
// pieces and byte fallback, and a ChatML template that reads no tools.
class StructuredLlamaVocab : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string tok_path = std::string(FS_MODELS_DIR) + "/llama2-tokenizer/tokenizer.model";
    if (!fs::exists(tok_path)) return;
    auto tok = Tokenizer::load(tok_path);
    dir = (fs::temp_directory_path() / ("flashserve_structured_" + std::to_string(getpid()))).string();
    write_tiny_model(dir, tok_path, *tok, /*max_model_len=*/1024, /*seed=*/5);
    server = new ServerProcess({"--model", dir, "--chat-template", "chatml"});
  }
  static void TearDownTestSuite() {
    delete server;
    server = nullptr;
    if (!dir.empty()) fs::remove_all(dir);
  }
  void SetUp() override {
    if (!server) GTEST_SKIP() << "no llama2-tokenizer in " << FS_MODELS_DIR;
    ASSERT_TRUE(server->started()) << server->log();
  }
  static std::string dir;
  static ServerProcess* server;
};
std::string StructuredLlamaVocab::dir;
ServerProcess* StructuredLlamaVocab::server = nullptr;

TEST_F(StructuredLlamaVocab, JsonSchemaOutputsValidateAndStreamAlike) {
  check_json_schemas(server->port(), 2);
}

TEST_F(StructuredLlamaVocab, ForcedToolCallsAreValid) {
  check_forced_tool_calls(server->port(), kTools, 2, 160);
}

}  // namespace
}  // namespace flashserve::testing
