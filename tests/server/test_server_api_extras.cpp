// The smaller endpoints and switches against the real binary (label server): GET
// /v1/models/{id}, /tokenize and /detokenize, the 404 for OpenAI routes this server lacks, CORS
// (--allowed-origins) through raw requests, --metrics-public, the at-once 400 for a bare-LF head
// and a TLS ClientHello, and stories260K (llama2.c) ending its story at BOS with "stop".
#include <gtest/gtest.h>

#include <chrono>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

const char* kKey = "extras-key";
const std::string kAuth = std::string("Authorization: Bearer ") + kKey;
const std::string kOrigin = "http://localhost:3000";

class ServerApiExtras : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--api-key", kKey, "--allowed-origins", kOrigin});
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << server_->log();
    delete server_;
  }
  void SetUp() override { ASSERT_TRUE(server_->started()) << server_->log(); }
  int port() const { return server_->port(); }
  http::Response post(const std::string& path, const json& body) {
    return http::request(port(), "POST", path, body.dump(), {kAuth});
  }
  // Sends `bytes` as they are on a fresh connection; the response and how long it took.
  http::Response raw(const std::string& bytes, double* seconds) {
    http::Connection c;
    if (!c.connect("127.0.0.1", port(), 10) || !c.send_all(bytes)) return {};
    const auto t0 = std::chrono::steady_clock::now();
    http::Response r = c.read_response();
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }
  static ServerProcess* server_;
};
ServerProcess* ServerApiExtras::server_ = nullptr;

TEST_F(ServerApiExtras, ModelById) {
  http::Response r = http::request(port(), "GET", "/v1/models/stories260K", "", {kAuth});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["id"], "stories260K");
  r = http::request(port(), "GET", "/v1/models/gpt-4o", "", {kAuth});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_not_found");
}

TEST_F(ServerApiExtras, TokenizeRoundTrip) {
  http::Response r = post("/tokenize", {{"prompt", "Once upon a time"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json t = json::parse(r.body);
  EXPECT_EQ(t["tokens"], json::array({1, 403, 407, 261, 378}));
  EXPECT_EQ(t["count"], 5);
  EXPECT_EQ(t["max_model_len"], 512);
  r = post("/detokenize", {{"tokens", t["tokens"]}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["prompt"], "Once upon a time");
  EXPECT_EQ(post("/detokenize", {{"tokens", {1, 512}}}).status, 400);
  EXPECT_EQ(post("/tokenize", {{"prompt", 3}}).status, 400);
  r = post("/tokenize", {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
  EXPECT_EQ(r.status, 400);  // stories260K has no chat template
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "chat_template_missing");
}

TEST_F(ServerApiExtras, UnsupportedOpenAiRoutesSaySo) {
  for (std::string path : {"/v1/audio/speech",
                           "/v1/images/generations", "/v1/files", "/v1/batches",
                           "/v1/moderations", "/v1/fine_tuning/jobs"}) {
    http::Response r = post(path, json::object());
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find(
                  "not supported by this server"), std::string::npos) << path << r.body;
  }
  http::Response r = post("/v1/nonsense", json::object());
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("Unknown route"), std::string::npos) << r.body;
}

TEST_F(ServerApiExtras, CorsPreflightAndResponses) {
  const std::string preflight =
      "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: a\r\nOrigin: " + kOrigin +
      "\r\nAccess-Control-Request-Method: POST\r\n"
      "Access-Control-Request-Headers: authorization, content-type, x-stainless-os, x-evil\r\n"
      "Connection: close\r\n\r\n";
  double s = 0;
  http::Response r = raw(preflight, &s);  // no API key: preflights carry none
  EXPECT_EQ(r.status, 204);
  EXPECT_EQ(r.headers["access-control-allow-origin"], kOrigin);
  EXPECT_EQ(r.headers["access-control-allow-methods"], "GET, POST, DELETE, OPTIONS");
  EXPECT_EQ(r.headers["access-control-allow-headers"],
            "Authorization, Content-Type, x-stainless-os");
  EXPECT_EQ(r.headers["access-control-max-age"], "600");

  std::string other = preflight;
  other.replace(other.find(kOrigin), kOrigin.size(), "http://evil.example");
  r = raw(other, &s);
  EXPECT_NE(r.status, 204);
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);

  r = http::request(port(), "GET", "/v1/models", "", {kAuth, "Origin: " + kOrigin});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["access-control-allow-origin"], kOrigin);
  EXPECT_EQ(r.headers["vary"], "Origin");
  r = http::request(port(), "GET", "/v1/models", "", {"Origin: " + kOrigin});
  EXPECT_EQ(r.status, 401);  // the browser can read the error
  EXPECT_EQ(r.headers["access-control-allow-origin"], kOrigin);
  r = http::request(port(), "GET", "/v1/models", "", {kAuth, "Origin: http://evil.example"});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers.count("access-control-allow-origin"), 0u);
}

TEST_F(ServerApiExtras, MetricsNeedTheKeyUnlessPublic) {
  EXPECT_EQ(http::request(port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(http::request(port(), "GET", "/metrics", "", {kAuth}).status, 200);
  ServerProcess open({"--api-key", kKey, "--metrics-public"});
  ASSERT_TRUE(open.started()) << open.log();
  EXPECT_EQ(http::request(open.port(), "GET", "/metrics").status, 200);
  EXPECT_EQ(http::request(open.port(), "GET", "/v1/models").status, 401);
  EXPECT_EQ(open.stop(), 0);
}

TEST_F(ServerApiExtras, BareLfAndTlsAreRefusedAtOnce) {
  double s = 0;
  http::Response r = raw("GET /health HTTP/1.1\nHost: a\n", &s);  // the head never ends in CRLF
  EXPECT_EQ(r.status, 400);
  EXPECT_LT(s, 1.5);  // not the head deadline's 408
  r = raw(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), &s);
  EXPECT_EQ(r.status, 400);
  EXPECT_LT(s, 1.5);
  EXPECT_NE(r.body.find("TLS"), std::string::npos) << r.body;
}

TEST_F(ServerApiExtras, Llama2cStoryEndsAtBos) {
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 64}, {"temperature", 0}};
  http::Response shortr = post("/v1/completions", body);
  body["max_tokens"] = 400;
  http::Response longr = post("/v1/completions", body);
  ASSERT_EQ(shortr.status, 200);
  ASSERT_EQ(longr.status, 200);
  const json a = json::parse(shortr.body)["choices"][0], b = json::parse(longr.body)["choices"][0];
  EXPECT_EQ(a["finish_reason"], "length");  // the golden 64 tokens hold no BOS
  EXPECT_EQ(b["finish_reason"], "stop");
  EXPECT_LT(json::parse(longr.body)["usage"]["completion_tokens"].get<int>(), 400);
  const std::string whole = b["text"];
  EXPECT_EQ(whole.rfind(a["text"].get<std::string>(), 0), 0u) << whole;
}

}  // namespace
}  // namespace flashserve::testing
