// What an operator sees: the start-up summary, one log line per finished request, the TTFT and
// time-per-output-token histograms in /metrics after real requests, the SSE content type, and a
// clean exit 0 on SIGINT (SIGTERM is covered by the other server tests). The prefix cache as an
// operator and a client see it: usage.prompt_tokens_details.cached_tokens, cache_salt, the log
// line, the flashserve_prefix_cache_* metrics, --no-prefix-caching.
#include <gtest/gtest.h>

#include <csignal>
#include <regex>
#include <string>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

// The value of the first /metrics line that starts with `prefix` (a name with its labels), or -1.
double metric_line(const std::string& text, const std::string& prefix) {
  size_t at = 0;
  while ((at = text.find(prefix, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const size_t sp = text.find(' ', at + prefix.size());
      return std::stod(text.substr(sp + 1, text.find('\n', sp) - sp - 1));
    }
    at += prefix.size();
  }
  return -1;
}

TEST(ServerObservability, LogsMetricsAndSigint) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  int status = 0;
  json r = complete(port, {{"prompt", "Once upon a time"}, {"max_tokens", 20}, {"temperature", 0}},
                    &status);
  ASSERT_EQ(status, 200) << r.dump();
  const std::string id = r["id"];
  http::Response s = http::request(
      port, "POST", "/v1/completions",
      json{{"prompt", "The dog"}, {"max_tokens", 10}, {"stream", true}}.dump());
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(s.headers["content-type"].rfind("text/event-stream", 0), 0u)
      << s.headers["content-type"];

  // Two requests finished: each histogram counted both, its buckets are cumulative and end at
  // +Inf with the count, and the sums are positive.
  const std::string m = http::request(port, "GET", "/metrics", "").body;
  for (const std::string h : {"flashserve_time_to_first_token_seconds",
                              "flashserve_time_per_output_token_seconds",
                              "flashserve_e2e_request_latency_seconds"}) {
    EXPECT_EQ(metric_line(m, h + "_count"), 2) << h << "\n" << m;
    EXPECT_GT(metric_line(m, h + "_sum"), 0) << h;
    EXPECT_EQ(metric_line(m, h + "_bucket{le=\"+Inf\"}"), 2) << h;
    EXPECT_NE(m.find("# TYPE " + h + " histogram"), std::string::npos) << h;
  }
  EXPECT_EQ(metric_line(m, "flashserve_generation_tokens_total"), 30);
  EXPECT_GT(metric_line(m, "flashserve_engine_steps_total"), 0);
  EXPECT_GE(metric_line(m, "flashserve_engine_step_seconds_total{phase=\"forward\"}"), 0);

  EXPECT_EQ(server.stop(SIGINT), 0) << "SIGINT must exit 0\n" << server.log();
  const std::string log = server.log();
  // Start-up summary: the model shape, the backend and the KV capacity in blocks and tokens.
  EXPECT_TRUE(std::regex_search(log, std::regex("model stories260K .*5 layers, hidden 64")))
      << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("backend cpu.*KV cache \\d+ blocks x 16 tokens = "
                                                "\\d+ tokens")))
      << log;
  // One line per finished request: id, prompt and completion tokens, TTFT, tokens/s.
  EXPECT_TRUE(std::regex_search(
      log, std::regex(id + " status=200 stream=0 prompt_tokens=5 completion_tokens=20 "
                           "ttft_ms=[0-9.]+ tokens_per_s=[0-9.]+")))
      << log;
  EXPECT_TRUE(std::regex_search(log, std::regex("status=200 stream=1 prompt_tokens=\\d+ "
                                                "completion_tokens=10 ")))
      << log;
}

// The same 60-odd-token prompt three times, then under another salt, then that salt again.
TEST(ServerObservability, PrefixCacheUsageSaltsLogAndMetrics) {
  for (bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching on" : "--no-prefix-caching");
    ServerProcess server(caching ? std::vector<std::string>{}
                                 : std::vector<std::string>{"--no-prefix-caching"});
    ASSERT_TRUE(server.started()) << server.log();
    const int port = server.port();
    std::string prompt;
    for (int i = 0; i < 12; ++i) prompt += "The little dog ran to the park. ";
    auto cached = [&](const json& extra, json* usage = nullptr) {
      json body = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
      if (extra.is_object()) body.update(extra);
      int status = 0;
      json r = complete(port, body, &status);
      EXPECT_EQ(status, 200) << r.dump();
      if (usage) *usage = r["usage"];
      return r["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
    };
    json usage;
    EXPECT_EQ(cached(json::object(), &usage), 0);
    const int prompt_tokens = usage["prompt_tokens"];
    ASSERT_GT(prompt_tokens, 48) << "the test needs several full 16-token blocks";
    const int expect = caching ? (prompt_tokens - 1) / 16 * 16 : 0;
    EXPECT_EQ(cached(json::object()), expect);
    EXPECT_EQ(cached({{"cache_salt", "tenant-b"}}), 0) << "another salt never hits";
    EXPECT_EQ(cached({{"cache_salt", "tenant-b"}}), expect) << "its own salt does";
    EXPECT_EQ(cached({{"cache_salt", "tenant-b"}, {"echo", true}, {"logprobs", 1}}), 0)
        << "prompt logprobs are computed from a full prefill";
    int status = 0;
    json bad = complete(port, {{"prompt", "x"}, {"cache_salt", 5}}, &status);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(bad["error"]["param"], "cache_salt");
    // Streamed usage has the field too.
    http::Response s = http::request(
        port, "POST", "/v1/completions",
        json{{"prompt", prompt}, {"max_tokens", 2}, {"stream", true},
             {"stream_options", {{"include_usage", true}}}}.dump());
    EXPECT_NE(s.body.find("\"cached_tokens\":" + std::to_string(expect)), std::string::npos)
        << s.body;

    const std::string m = http::request(port, "GET", "/metrics", "").body;
    const double used = metric_line(m, "flashserve_kv_blocks_used");
    const double free = metric_line(m, "flashserve_kv_blocks_free");
    const double kept = metric_line(m, "flashserve_prefix_cache_blocks");
    EXPECT_EQ(used, 0);
    EXPECT_EQ(used + free + kept, metric_line(m, "flashserve_kv_blocks_total")) << m;
    EXPECT_EQ(metric_line(m, "flashserve_prefix_cache_hits_tokens_total"), 3 * expect);
    EXPECT_EQ(metric_line(m, "flashserve_prefix_cache_evictions_total"), 0);
    if (caching) {
      EXPECT_GT(kept, 0);
      // Queried: every request except the prompt-logprobs one.
      EXPECT_EQ(metric_line(m, "flashserve_prefix_cache_queries_tokens_total"), 5 * prompt_tokens);
    } else {
      EXPECT_EQ(kept, 0);
      EXPECT_EQ(metric_line(m, "flashserve_prefix_cache_queries_tokens_total"), 0);
    }
    EXPECT_EQ(server.stop(SIGTERM), 0);
    EXPECT_TRUE(std::regex_search(server.log(), std::regex("total_ms=[0-9.]+ cached_tokens=" +
                                                           std::to_string(expect))))
        << server.log();
    EXPECT_NE(server.log().find(caching ? "prefix caching on" : "prefix caching off"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace flashserve::testing
