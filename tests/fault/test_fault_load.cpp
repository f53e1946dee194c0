// Faults under load against the real binary (label server):
//  - a KV cache far too small for the offered load: requests are preempted and recomputed, every
//    one completes with the text it has when run alone, the cache drains to 0 blocks, and a
//    request afterwards is as fast as before (recovery);
//  - SIGTERM while dozens of clients are sending: exit 0 within seconds, every client gets an
//    answer (200, 503, a stream ended by [DONE]) or a refused/closed connection, none hangs.
// (Queue-full 503 + Retry-After is tests/server/test_server_errors; a single SIGTERM with two
// requests in flight is tests/server/test_server_disconnect.)
#include <gtest/gtest.h>

#include <random>

#include "tests/fault/fault_util.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string text_of(const http::Response& r, bool stream) {
  if (!stream) return json::parse(r.body)["choices"][0]["text"];
  std::string text;
  for (const auto& d : http::sse_data(r.body)) {
    if (d == "[DONE]") continue;
    const json chunk = json::parse(d);
    for (const auto& c : chunk.at("choices")) text += c.at("text").get<std::string>();
  }
  return text;
}

TEST(FaultLoad, KvCacheExhaustionPreemptsThenRecovers) {
  // 12 blocks of 16 = 192 tokens for 24 clients wanting up to ~170 tokens each.
  ServerProcess server({"--kv-cache-tokens", "192", "--max-num-seqs", "16", "--no-request-log"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  std::vector<json> bodies;
  for (int i = 0; i < 6; ++i) {
    bodies.push_back({{"prompt", std::string(i % 2 ? "The little dog" : "Once upon a time") +
                                     std::string(size_t(i), '!')},
                      {"max_tokens", 100 + 12 * i}, {"ignore_eos", true},
                      {"temperature", i % 3 == 0 ? 0.0 : 0.9}, {"seed", 11 + i}});
  }
  std::vector<std::string> alone;
  const auto idle_start = Clock::now();
  for (const auto& b : bodies) {
    http::Response r = http::request(port, "POST", "/v1/completions", b.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    alone.push_back(text_of(r, false));
  }
  const double idle_s = seconds_since(idle_start) / double(bodies.size());
  ASSERT_EQ(metric(port, "flashserve_preemptions_total"), 0);

  std::vector<http::Response> out(24);
  std::vector<std::thread> clients;
  for (int c = 0; c < 24; ++c) {
    clients.emplace_back([&, c] {
      json b = bodies[size_t(c) % bodies.size()];
      b["stream"] = c % 2 == 1;
      out[size_t(c)] = http::request(port, "POST", "/v1/completions", b.dump());
    });
  }
  for (auto& t : clients) t.join();
  for (int c = 0; c < 24; ++c) {
    ASSERT_EQ(out[size_t(c)].status, 200) << out[size_t(c)].body;
    EXPECT_EQ(text_of(out[size_t(c)], c % 2 == 1), alone[size_t(c) % bodies.size()])
        << "client " << c << ": " << out[size_t(c)].body.substr(0, 400);
  }
  const double preemptions = metric(port, "flashserve_preemptions_total");
  EXPECT_GT(preemptions, 0) << "the cache was never exhausted";
  EXPECT_EQ(wait_metric(port, "flashserve_kv_blocks_used", 0, 2000ms), 0);
  EXPECT_EQ(metric(port, "flashserve_requests_waiting"), 0);

  // Recovery: the same requests alone take about as long as before the storm.
  const auto after_start = Clock::now();
  for (size_t i = 0; i < bodies.size(); ++i) {
    http::Response r = http::request(port, "POST", "/v1/completions", bodies[i].dump());
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(text_of(r, false), alone[i]);
  }
  const double after_s = seconds_since(after_start) / double(bodies.size());
  EXPECT_LT(after_s, 3 * idle_s + 0.2) << "idle " << idle_s << " s, after " << after_s << " s";
  EXPECT_EQ(metric(port, "flashserve_preemptions_total"), preemptions) << "preempted when alone";
  std::printf("preemptions %.0f; per request alone %.3f s before, %.3f s after\n", preemptions,
              idle_s, after_s);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultLoad, SigtermUnderLoadExitsCleanly) {
  ServerProcess server({"--max-num-seqs", "16", "--max-queue", "16", "--no-request-log"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  std::atomic<bool> stopping{false};
  std::atomic<int> answered{0}, refused{0}, bad{0}, after_stop{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 40; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      while (true) {
        const bool was_stopping = stopping.load();
        const bool stream = rng() % 2;
        json b = {{"prompt", "Once upon a time"}, {"max_tokens", 20 + rng() % 200},
                  {"ignore_eos", true}, {"stream", stream}, {"n", 1 + rng() % 3}};
        http::Connection conn;
        if (!conn.connect("127.0.0.1", port, 30)) {  // the listener is closed: done
          ++refused;
          return;
        }
        const auto t0 = Clock::now();
        http::Response r;
        if (conn.send_request("POST", "/v1/completions", b.dump())) r = conn.read_response();
        if (seconds_since(t0) > 25) ++bad;  // a request that hung
        const bool done_stream = stream && r.status == 200 &&
                                 r.body.find("data: [DONE]\n\n") != std::string::npos;
        if ((r.status == 200 && (!stream || done_stream)) || r.status == 503) {
          ++answered;
        } else if (r.status == 0 && stopping) {
          ++after_stop;  // the connection closed during shutdown, without an answer
        } else {
          ++bad;
          ADD_FAILURE() << "status " << r.status << " stream " << stream << ": " << r.body.substr(0, 300);
        }
        if (was_stopping) return;
      }
    });
  }
  std::this_thread::sleep_for(1500ms);
  ASSERT_GT(metric(port, "flashserve_requests_running"), 0);
  stopping = true;
  const auto t0 = Clock::now();
  const int code = server.stop(SIGTERM);
  const double exit_s = seconds_since(t0);
  for (auto& t : clients) t.join();
  EXPECT_EQ(code, 0) << server.log().substr(0, 3000);
  EXPECT_LT(exit_s, 10.0);
  EXPECT_EQ(bad, 0);
  EXPECT_GT(answered, 0);
  std::printf("SIGTERM under load: exit %d after %.2f s; %d answered, %d closed at shutdown, "
              "%d refused\n", code, exit_s, answered.load(), after_stop.load(), refused.load());
}

}  // namespace
}  // namespace flashserve::testing
