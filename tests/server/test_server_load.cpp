// A bounded soak test on loopback (label server): hundreds of requests, dozens at once, random
// lengths, streaming and not, random hang-ups. Every request is answered (200) or rejected with
// 503 + Retry-After; the server never crashes, leaks no KV blocks, and its RSS stays flat.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

struct Tally {
  std::atomic<int> ok{0}, rejected{0}, hung_up{0}, bad{0};
};

void client(int port, int seed, int num_requests, Tally* t) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int i = 0; i < num_requests; ++i) {
    json body = {{"prompt", std::string(uniform(0, 200), 'a') + " Once upon a time"},
                 {"max_tokens", uniform(1, 200)}, {"temperature", uniform(0, 10) / 10.0},
                 {"seed", uniform(0, 1000)}, {"ignore_eos", uniform(0, 1) == 1}};
    const bool stream = uniform(0, 2) == 0;
    const int hang_up = uniform(0, 9);  // 0: hang up early
    body["stream"] = stream;
    http::Connection c;
    if (!c.connect("127.0.0.1", port) || !c.send_request("POST", "/v1/completions", body.dump())) {
      ++t->bad;
      continue;
    }
    if (hang_up == 0 && !stream) {
      std::this_thread::sleep_for(std::chrono::milliseconds(uniform(0, 30)));
      c.close();
      ++t->hung_up;
      continue;
    }
    int pieces = 0;
    const int stop_after = hang_up == 0 ? uniform(1, 5) : 1 << 30;
    http::Response r = c.read_response([&](std::string_view) { return ++pieces < stop_after; });
    if (hang_up == 0 && pieces >= stop_after) {
      ++t->hung_up;
    } else if (r.status == 200) {
      bool complete = !stream || r.body.find("data: [DONE]\n\n") != std::string::npos;
      complete ? ++t->ok : ++t->bad;
    } else if (r.status == 503 && r.headers.count("retry-after")) {
      ++t->rejected;
      // Back off as a client should (briefly: Retry-After says 1 s). Without it a rejected client
      // is back within microseconds and the 32 clients mostly measure the 503 path once the
      // listen queue stops pacing them (it did at cpp-httplib's backlog of 5).
      std::this_thread::sleep_for(std::chrono::milliseconds(uniform(20, 100)));
    } else {
      ADD_FAILURE() << "status " << r.status << ": " << r.body;
      ++t->bad;
    }
  }
}

void round(int port, int seed, Tally* t) {
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i) threads.emplace_back(client, port, seed * 100 + i, 6, t);
  for (auto& th : threads) th.join();
}

TEST(ServerLoad, SoakWithRandomDisconnects) {
  ServerProcess server({"--max-num-seqs", "16", "--max-queue", "12", "--no-request-log"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  Tally t;
  round(port, 1, &t);  // warm-up: allocator pools, thread stacks
  ASSERT_EQ(wait_metric(port, "flashserve_kv_blocks_used", 0, std::chrono::seconds(2)), 0);
  const long rss_warm = server.rss_kib();
  for (int r = 2; r <= 3; ++r) round(port, r, &t);
  EXPECT_TRUE(server.alive());
  EXPECT_EQ(wait_metric(port, "flashserve_kv_blocks_used", 0, std::chrono::seconds(2)), 0);
  EXPECT_EQ(metric(port, "flashserve_requests_running"), 0);
  EXPECT_EQ(metric(port, "flashserve_requests_waiting"), 0);
  const long rss_end = server.rss_kib();
  const int total = 3 * 32 * 6;
  EXPECT_EQ(t.ok + t.rejected + t.hung_up, total) << "bad: " << t.bad;
  EXPECT_EQ(t.bad, 0);
  EXPECT_GT(t.ok, total / 2);
  EXPECT_GT(t.hung_up, 0);
  // RSS flat: two more rounds after warm-up grow it by less than 8 MiB.
  EXPECT_LT(rss_end - rss_warm, 8 * 1024) << "RSS " << rss_warm << " -> " << rss_end << " KiB";
  std::printf("ok %d rejected %d hung_up %d; RSS %ld -> %ld KiB\n", t.ok.load(),
              t.rejected.load(), t.hung_up.load(), rss_warm, rss_end);
  int status = 0;
  complete(port, {{"prompt", "Hi"}, {"max_tokens", 4}}, &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(server.stop(), 0) << server.log().substr(0, 4000);
}

}  // namespace
}  // namespace flashserve::testing
