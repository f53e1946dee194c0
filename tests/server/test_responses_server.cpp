// /v1/responses and --enable-force-include-usage against the real binary (label server):
// stories260K with --chat-template chatml. A response whole and streamed (same greedy text, the
// event framing), previous_response_id, GET and DELETE with their 404s, store false, the routes'
// methods; and chat and completion streams that end with usage although nobody asked.
#include <gtest/gtest.h>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

class ResponsesServer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--chat-template", "chatml", "--enable-force-include-usage"});
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << server_->log();
    delete server_;
  }
  void SetUp() override { ASSERT_TRUE(server_->started()) << server_->log(); }
  http::Response call(const std::string& method, const std::string& path, const json& body = {}) {
    return http::request(server_->port(), method, path, body.is_null() ? "" : body.dump());
  }
  json ok(const std::string& method, const std::string& path, const json& body = {}) {
    http::Response r = call(method, path, body);
    EXPECT_EQ(r.status, 200) << method << " " << path << ": " << r.body;
    return r.status == 200 ? json::parse(r.body) : json();
  }
  static ServerProcess* server_;
};
ServerProcess* ResponsesServer::server_ = nullptr;

const json kAsk = {{"input", "Once upon a time"}, {"max_output_tokens", 10}, {"temperature", 0}};

TEST_F(ResponsesServer, WholeStreamedAndStored) {
  const json whole = ok("POST", "/v1/responses", kAsk);
  ASSERT_EQ(whole["object"], "response");
  EXPECT_EQ(whole["output"][0]["type"], "message");
  const std::string text = whole["output"][0]["content"][0]["text"];
  EXPECT_LE(whole["usage"]["output_tokens"].get<int>(), 10);

  json body = kAsk;
  body["stream"] = true;
  http::Response s = call("POST", "/v1/responses", body);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_NE(s.headers["content-type"].find("text/event-stream"), std::string::npos);
  EXPECT_EQ(s.body.rfind("event: response.created\ndata: {", 0), 0u) << s.body.substr(0, 80);
  std::string streamed;
  json last;
  for (const std::string& d : http::sse_data(s.body)) {  // sse_data keeps "data:" first blocks
    ADD_FAILURE() << "an event without its event: line: " << d;
  }
  size_t pos = 0;
  while ((pos = s.body.find("\ndata: ", pos)) != std::string::npos) {
    const size_t end = s.body.find("\n\n", pos);
    last = json::parse(s.body.substr(pos + 7, end - pos - 7));
    if (last["type"] == "response.output_text.delta") streamed += last["delta"].get<std::string>();
    pos = end;
  }
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(last["response"]["status"], whole["status"]);
  EXPECT_EQ(last["response"]["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
  EXPECT_EQ(last["response"]["usage"]["input_tokens"], whole["usage"]["input_tokens"]);
  // The streamed response is stored too.
  EXPECT_EQ(ok("GET", "/v1/responses/" + last["response"]["id"].get<std::string>())["output"],
            last["response"]["output"]);

  // A second turn on the first: its prompt holds the first turn.
  const json next = ok("POST", "/v1/responses",
                       {{"input", "Then?"}, {"previous_response_id", whole["id"]},
                        {"max_output_tokens", 4}});
  EXPECT_EQ(next["previous_response_id"], whole["id"]);
  EXPECT_GT(next["usage"]["input_tokens"].get<int>(),
            whole["usage"]["input_tokens"].get<int>() + whole["usage"]["output_tokens"].get<int>());

  const std::string id = whole["id"];
  EXPECT_EQ(ok("GET", "/v1/responses/" + id), whole);
  EXPECT_EQ(ok("DELETE", "/v1/responses/" + id),
            json({{"id", id}, {"object", "response"}, {"deleted", true}}));
  for (const char* method : {"GET", "DELETE"}) {
    http::Response r = call(method, "/v1/responses/" + id);
    EXPECT_EQ(r.status, 404) << method;
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "not_found");
  }
  json unstored = kAsk;
  unstored["store"] = false;
  const json u = ok("POST", "/v1/responses", unstored);
  EXPECT_EQ(call("GET", "/v1/responses/" + u["id"].get<std::string>()).status, 404);
  http::Response r = call("POST", "/v1/responses", {{"input", "x"}, {"previous_response_id", u["id"]}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "previous_response_id");
  r = call("GET", "/v1/responses");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "POST");
}

TEST_F(ResponsesServer, ForcedUsageEndsEveryStream) {
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                     {"max_tokens", 5}, {"stream", true}};
  const json completion = {{"prompt", "Once"}, {"max_tokens", 5}, {"stream", true}};
  for (const auto& [path, body] : {std::pair{"/v1/chat/completions", chat},
                                   std::pair{"/v1/completions", completion}}) {
    http::Response r = call("POST", path, body);
    ASSERT_EQ(r.status, 200) << r.body;
    const std::vector<std::string> data = http::sse_data(r.body);
    ASSERT_GE(data.size(), 2u);
    EXPECT_EQ(data.back(), "[DONE]");
    const json usage = json::parse(data[data.size() - 2]);
    EXPECT_EQ(usage["choices"], json::array()) << path;
    EXPECT_EQ(usage["usage"]["completion_tokens"], 5) << path;
  }
}

}  // namespace
}  // namespace flashserve::testing
