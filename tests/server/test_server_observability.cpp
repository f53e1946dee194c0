// What an operator sees: the start-up summary, one log line per finished request, the TTFT and
// time-per-output-token histograms in /metrics after real requests, the SSE content type, and a
// clean exit 0 on SIGINT (SIGTERM is covered by the other server tests).
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

}  // namespace
}  // namespace flashserve::testing
