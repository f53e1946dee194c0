// Bad requests against the real binary (label server): each gets its documented status and the
// OpenAI error envelope, and the server keeps serving. Runs with an API key and a small body
// limit so that 401 and 413 are reachable.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

const char* kKey = "test-key-123";
const std::string kAuth = std::string("Authorization: Bearer ") + kKey;

struct Case {
  std::string name, method, path, body;
  std::vector<std::string> headers;
  int status;
  std::string code;  // expected error.code ("" = any)
};

TEST(ServerErrors, EveryBadRequestGetsItsStatusAndEnvelope) {
  ServerProcess server({"--api-key", kKey, "--max-body-bytes", "65536"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  std::string long_words;
  for (int i = 0; i < 700; ++i) long_words += "cat ";
  const std::vector<Case> cases = {
      {"malformed JSON", "POST", "/v1/completions", "{\"prompt\": \"hi\"", {kAuth}, 400, ""},
      {"empty body", "POST", "/v1/completions", "", {kAuth}, 400, ""},
      {"not an object", "POST", "/v1/completions", "[1,2,3]", {kAuth}, 400, ""},
      {"wrong type", "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":"5"})", {kAuth},
       400, ""},
      {"wrong prompt type", "POST", "/v1/completions", R"({"prompt":{"a":1}})", {kAuth}, 400, ""},
      {"out of range", "POST", "/v1/completions", R"({"prompt":"hi","temperature":7})", {kAuth},
       400, ""},
      {"top_p 0 as a float", "POST", "/v1/completions", R"({"prompt":"hi","top_p":1e-50})",
       {kAuth}, 400, ""},
      {"repetition_penalty inf as a float", "POST", "/v1/completions",
       R"({"prompt":"hi","repetition_penalty":1e300})", {kAuth}, 400, ""},
      {"negative max_tokens", "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":-5})",
       {kAuth}, 400, ""},
      {"bad token id", "POST", "/v1/completions", R"({"prompt":[1,99999]})", {kAuth}, 400, ""},
      {"huge max_tokens", "POST", "/v1/completions",
       R"({"prompt":"hi","max_tokens":1000000000000})", {kAuth}, 400, "context_length_exceeded"},
      {"max_tokens over context", "POST", "/v1/completions", R"({"prompt":"hi","max_tokens":600})",
       {kAuth}, 400, "context_length_exceeded"},
      {"prompt longer than context", "POST", "/v1/completions",
       json{{"prompt", long_words}, {"max_tokens", 1}}.dump(), {kAuth}, 400,
       "context_length_exceeded"},
      {"unknown parameter", "POST", "/v1/completions", R"({"prompt":"hi","foo":1})", {kAuth}, 400,
       "unknown_parameter"},
      {"best_of", "POST", "/v1/completions", R"({"prompt":"hi","best_of":3})", {kAuth}, 400,
       "unsupported_parameter"},
      {"suffix", "POST", "/v1/completions", R"({"prompt":"hi","suffix":"x"})", {kAuth}, 400,
       "unsupported_parameter"},
      {"unknown model", "POST", "/v1/completions", R"({"prompt":"hi","model":"gpt-9"})", {kAuth},
       404, "model_not_found"},
      {"oversized body", "POST", "/v1/completions",
       json{{"prompt", std::string(100000, 'x')}}.dump(), {kAuth}, 413, "payload_too_large"},
      {"missing API key", "POST", "/v1/completions", R"({"prompt":"hi"})", {}, 401,
       "invalid_api_key"},
      {"wrong API key", "POST", "/v1/completions", R"({"prompt":"hi"})",
       {"Authorization: Bearer nope"}, 401, "invalid_api_key"},
      {"key without Bearer", "GET", "/v1/models", "", {std::string("Authorization: ") + kKey},
       401, "invalid_api_key"},
      {"unknown route", "GET", "/v2/nothing", "", {kAuth}, 404, "not_found"},
      {"wrong method", "GET", "/v1/completions", "", {kAuth}, 405, "method_not_allowed"},
      {"invalid UTF-8 in JSON", "POST", "/v1/completions", "{\"prompt\":\"\xC3\x28\"}", {kAuth},
       400, ""},
      {"deep nesting", "POST", "/v1/completions", "{\"prompt\":" + std::string(30000, '['),
       {kAuth}, 400, ""},
  };
  for (const Case& c : cases) {
    http::Response r = http::request(port, c.method, c.path, c.body, c.headers);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << c.name << ": " << r.body;
    const json& e = j["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.name;
    EXPECT_TRUE(e["type"].is_string()) << c.name;
    EXPECT_TRUE(e.contains("param") && e.contains("code")) << c.name;
    if (!c.code.empty()) {
      EXPECT_EQ(e["code"], c.code) << c.name << ": " << r.body;
    }
    EXPECT_EQ(r.headers["content-type"].rfind("application/json", 0), 0u) << c.name;
    // Still serving after each one.
    ASSERT_EQ(http::request(port, "GET", "/health").status, 200) << "after " << c.name;
  }
  // /health needs no key; everything else works with it.
  EXPECT_EQ(http::request(port, "GET", "/health").status, 200);
  http::Response models = http::request(port, "GET", "/v1/models", "", {kAuth});
  EXPECT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "stories260K");
  http::Response ok = http::request(port, "POST", "/v1/completions",
                                    R"({"prompt":"hi","max_tokens":3,"model":"stories260K"})",
                                    {kAuth});
  EXPECT_EQ(ok.status, 200) << ok.body;
  // The key never reaches the log.
  EXPECT_EQ(server.log().find(kKey), std::string::npos);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(ServerErrors, QueueFullIs503WithRetryAfter) {
  // One running sequence, one waiting slot: a burst of long requests overflows the queue.
  ServerProcess server({"--max-num-seqs", "1", "--max-queue", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  std::vector<http::Response> responses(12);
  std::vector<std::thread> threads;
  auto send = [&](int i) {
    threads.emplace_back([&, i] {
      responses[i] = http::request(server.port(), "POST", "/v1/completions",
                                   R"({"prompt":"Once","max_tokens":300,"ignore_eos":true})");
    });
  };
  // The first one must be running before the burst: else the whole burst can find it still
  // in the queue's one slot, and only it would be served.
  send(0);
  for (int tries = 0; tries < 200; ++tries) {
    const std::string metrics = http::request(server.port(), "GET", "/metrics").body;
    if (metrics.find("flashserve_requests_running 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int i = 1; i < 12; ++i) send(i);
  for (auto& t : threads) t.join();
  int ok = 0, rejected = 0;
  for (auto& r : responses) {
    if (r.status == 200) ++ok;
    if (r.status == 503) {
      ++rejected;
      EXPECT_EQ(r.headers["retry-after"], "1");
      EXPECT_EQ(json::parse(r.body)["error"]["code"], "server_overloaded");
    }
  }
  EXPECT_EQ(ok + rejected, 12);
  EXPECT_GE(ok, 2);
  EXPECT_GE(rejected, 1);
  // More choices than the queue holds could never be admitted: 400 naming n, not a 503 to
  // retry forever. As many as it holds are served.
  http::Response many = http::request(server.port(), "POST", "/v1/completions",
                                      R"({"prompt":"Once","max_tokens":2,"n":2})");
  EXPECT_EQ(many.status, 400) << many.body;
  EXPECT_EQ(many.headers.count("retry-after"), 0u);
  EXPECT_EQ(json::parse(many.body)["error"]["param"], "n") << many.body;
  http::Response lists = http::request(server.port(), "POST", "/v1/completions",
                                       R"({"prompt":["Once","Twice"],"max_tokens":2})");
  EXPECT_EQ(lists.status, 400) << lists.body;
  http::Response one = http::request(server.port(), "POST", "/v1/completions",
                                     R"({"prompt":"Once","max_tokens":2,"n":1})");
  EXPECT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace flashserve::testing
