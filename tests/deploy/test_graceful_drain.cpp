// --drain-timeout, the graceful termination deploy/'s manifests rely on: SIGTERM with a stream in
// flight lets it finish whole (finish_reason "length", [DONE]) while a new request gets 503 and
// /health 503, then exit 0; without the flag the stream is aborted at once (the default), and a
// drain that outlasts its timeout aborts what is left and still exits 0.
#include <gtest/gtest.h>

#include <thread>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using nlohmann::json;

// A stream of `tokens` tokens; SIGTERM to `server` at its first event, then (during the drain)
// /health until it turns 503, and a new request; their statuses go to *health and *late.
StreamResult stream_through_sigterm(ServerProcess& server, int tokens, int* late, int* health) {
  bool first = true;
  StreamResult out;
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", tokens}, {"ignore_eos", true},
                     {"temperature", 0}, {"stream", true}};
  http::Response r = http::request(server.port(), "POST", "/v1/completions", body.dump(), {},
                                   [&](std::string_view) {
                                     if (first) {
                                       kill(server.pid(), SIGTERM);
                                       // The drain starts when the signal is handled: /health
                                       // says so (within 5 s, for slow sanitizer builds).
                                       for (int i = 0; i < 500; ++i) {
                                         *health = http::request(server.port(), "GET", "/health").status;
                                         if (*health == 503) break;
                                         std::this_thread::sleep_for(std::chrono::milliseconds(10));
                                       }
                                       *late = http::request(server.port(), "POST", "/v1/completions",
                                                             json{{"prompt", "Lily"}}.dump()).status;
                                     }
                                     first = false;
                                     return true;
                                   });
  out.status = r.status;
  for (const std::string& d : http::sse_data(r.body)) {
    if (d == "[DONE]") {
      out.done = true;
      continue;
    }
    const json j = json::parse(d, nullptr, false);
    if (j.contains("choices") && !j["choices"].empty() && j["choices"][0].contains("text"))
      out.text += j["choices"][0]["text"].get<std::string>();
    if (j.contains("choices") && !j["choices"].empty() && j["choices"][0]["finish_reason"].is_string())
      out.finish_reason = j["choices"][0]["finish_reason"];
    out.chunks.push_back(j);
  }
  return out;
}

TEST(GracefulDrain, SigtermLetsTheStreamInFlightFinish) {
  ServerProcess server({"--drain-timeout", "30"});
  ASSERT_TRUE(server.started()) << server.log();
  int late = 0, health = 0;
  const StreamResult s = stream_through_sigterm(server, 400, &late, &health);
  EXPECT_EQ(s.finish_reason, "length") << server.log();
  EXPECT_TRUE(s.done);
  EXPECT_EQ(late, 503) << "new requests are refused while draining";
  EXPECT_EQ(health, 503) << "/health turns 503 at once: the load balancer stops sending";
  EXPECT_EQ(server.stop(), 0);
  EXPECT_NE(server.log().find("in-flight requests finished in"), std::string::npos) << server.log();
}

TEST(GracefulDrain, WithoutTheFlagTheStreamIsAborted) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  int late = 0, health = 0;
  const StreamResult s = stream_through_sigterm(server, 400, &late, &health);
  EXPECT_NE(s.finish_reason, "length");
  EXPECT_EQ(server.stop(), 0);
}

TEST(GracefulDrain, ATimeoutAbortsWhatIsLeft) {
  ServerProcess server({"--drain-timeout", "0.05"});
  ASSERT_TRUE(server.started()) << server.log();
  int late = 0, health = 0;
  const StreamResult s = stream_through_sigterm(server, 480, &late, &health);
  EXPECT_NE(s.finish_reason, "length");
  EXPECT_EQ(server.stop(), 0);
  EXPECT_NE(server.log().find("--drain-timeout 0.05 s passed; aborting 1 requests"), std::string::npos)
      << server.log();
}

}  // namespace
}  // namespace flashserve::testing
