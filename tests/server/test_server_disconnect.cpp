// Client disconnects and shutdown against the real binary (label server): a client that hangs
// up mid-stream or while waiting for a non-streamed answer frees its KV blocks (seen in
// /metrics) within a second; SIGTERM with requests in flight ends them and exits 0.
#include <gtest/gtest.h>

#include <thread>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

// 16 choices x 480 tokens: long enough on any machine that a hang-up lands mid-generation.
const json kLong = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"n", 16},
                    {"ignore_eos", true}, {"temperature", 1}, {"seed", 1}};

TEST(ServerDisconnect, MidStreamFreesBlocks) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  json body = kLong;
  body["stream"] = true;
  http::Connection c;
  ASSERT_TRUE(c.connect("127.0.0.1", port));
  ASSERT_TRUE(c.send_request("POST", "/v1/completions", body.dump()));
  int pieces = 0;
  http::Response r = c.read_response([&](std::string_view) { return ++pieces < 3; });
  EXPECT_EQ(r.status, 200);
  const auto hung_up = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_metric(port, "flashserve_kv_blocks_used", 0, milliseconds(1000)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - hung_up, milliseconds(1000));
  EXPECT_EQ(wait_metric(port, "flashserve_client_disconnects_total", 1, milliseconds(1000)), 1);
  // It was cancelled, not run to the end.
  EXPECT_LT(metric(port, "flashserve_generation_tokens_total"), 16 * 480);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(ServerDisconnect, MidNonStreamFreesBlocks) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  http::Connection c;
  ASSERT_TRUE(c.connect("127.0.0.1", port));
  ASSERT_TRUE(c.send_request("POST", "/v1/completions", kLong.dump()));
  // Wait until it is generating (blocks in use), then hang up without reading.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (metric(port, "flashserve_kv_blocks_used") <= 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_GT(metric(port, "flashserve_kv_blocks_used"), 0);
  c.close();
  const auto hung_up = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_metric(port, "flashserve_kv_blocks_used", 0, milliseconds(1000)), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - hung_up, milliseconds(1000));
  EXPECT_EQ(wait_metric(port, "flashserve_client_disconnects_total", 1, milliseconds(1000)), 1);
  EXPECT_LT(metric(port, "flashserve_generation_tokens_total"), 16 * 480);
  // Still serving.
  int status = 0;
  complete(port, {{"prompt", "Hi"}, {"max_tokens", 4}}, &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(ServerShutdown, SigtermWithRequestsInFlightExitsZero) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  http::Response streamed, plain;
  std::thread a([&] {
    json body = kLong;
    body["stream"] = true;
    streamed = http::request(port, "POST", "/v1/completions", body.dump());
  });
  std::thread b([&] { plain = http::request(port, "POST", "/v1/completions", kLong.dump()); });
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (metric(port, "flashserve_requests_running") < 32 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.log();
  a.join();
  b.join();
  // The stream ends with an error event and [DONE]; the plain request gets a 503 envelope.
  EXPECT_EQ(streamed.status, 200);
  auto events = http::sse_data(streamed.body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(json::parse(events[events.size() - 2]).contains("error"));
  EXPECT_EQ(plain.status, 503) << plain.body;
  EXPECT_TRUE(json::parse(plain.body, nullptr, false).contains("error"));
}

}  // namespace
}  // namespace flashserve::testing
