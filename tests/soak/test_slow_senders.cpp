// Slow-sender soak (label soak): FS_SLOW_CONNECTIONS clients (default 100 in CI; 600 for the
// recorded run) each drip a request head one byte every FS_SLOW_DRIP_MS (default 1000) for
// FS_SLOW_SECONDS (default 8; 60 for the recorded run), reconnecting whenever the server answers
// 408 (head deadline) and closes. Meanwhile one normal client makes greedy completions back to
// back. Its p99 latency is compared with an unloaded run of the same client just before:
// the normal client loses nothing and its p99 stays within 2x of the unloaded p99 (+5 ms for
// timer noise on a shared CPU). FS_SLOW_REPORT appends a JSON line with the figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/fault/fault_util.h"

namespace flashserve::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

struct ClientRun {
  std::vector<double> latencies_s;
  int failed = 0;
  double p99() const {
    if (latencies_s.empty()) return 0;
    std::vector<double> v = latencies_s;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, size_t(double(v.size()) * 0.99))];
  }
};

// The normal client: completions one after another (each on a fresh connection) for `seconds`.
ClientRun normal_client(int port, double seconds) {
  const std::string body = R"({"prompt":"Once upon a time","max_tokens":16,"temperature":0})";
  ClientRun run;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    const int status = http::request(port, "POST", "/v1/completions", body).status;
    run.latencies_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    run.failed += status != 200;
  }
  return run;
}

// One drip connection: a socket and the next byte of the head to send.
struct Drip {
  int fd = -1;
  size_t next = 0;
  Clock::time_point due;
};

TEST(SlowSenders, NormalClientLosesNothingAndKeepsItsLatency) {
  const int connections = int(env_int("FS_SLOW_CONNECTIONS", 100));
  const double seconds = double(env_int("FS_SLOW_SECONDS", 8));
  const auto drip_every = std::chrono::milliseconds(env_int("FS_SLOW_DRIP_MS", 1000));
  ASSERT_GT(raise_fd_limit(), 2 * connections + 100) << "raise ulimit -n";
  ServerProcess server({"--no-request-log"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();

  normal_client(port, 1.0);  // warm-up
  const ClientRun unloaded = normal_client(port, std::min(seconds, 10.0));

  // The drippers, from 127.0.0.2 on (100 per address: under the per-client cap of 256).
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "X-Padding: " + std::string(400, 'p') + "\r\n";
  std::atomic<bool> stop{false};
  std::atomic<long> answered_408{0}, reconnects{0}, open_min{connections};
  std::thread dripper([&] {
    std::vector<Drip> drips(static_cast<size_t>(connections));
    auto ip_of = [](size_t i) { return "127.0.0." + std::to_string(2 + i / 100); };
    const auto start = Clock::now();
    for (size_t i = 0; i < drips.size(); ++i) {
      drips[i].fd = raw_connect_from(port, ip_of(i).c_str());
      // Spread the sends over the interval so they do not all land at once.
      drips[i].due = start + drip_every * i / connections;
    }
    while (!stop) {
      const auto now = Clock::now();
      long open = 0;
      for (size_t i = 0; i < drips.size(); ++i) {
        Drip& d = drips[i];
        char buf[4096];
        const ssize_t n = d.fd < 0 ? 0 : recv(d.fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0 || n == 0) {  // answered (408) or closed: count, and come back as a new client
          if (n > 0 && std::string(buf, size_t(n)).rfind("HTTP/1.1 408", 0) == 0) ++answered_408;
          if (d.fd >= 0) close(d.fd);
          d.fd = raw_connect_from(port, ip_of(i).c_str());
          d.next = 0;
          ++reconnects;
        }
        open += d.fd >= 0;
        if (d.fd >= 0 && now >= d.due) {
          send(d.fd, &head[d.next % head.size()], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          ++d.next;
          d.due = now + drip_every;
        }
      }
      if (now - start > 2s) open_min = std::min(open_min.load(), open);
      std::this_thread::sleep_for(20ms);
    }
    for (Drip& d : drips) {
      if (d.fd >= 0) close(d.fd);
    }
  });
  std::this_thread::sleep_for(2s);  // every drip connection open and dripping
  const ClientRun loaded = normal_client(port, seconds);
  stop = true;
  dripper.join();

  const double p99_unloaded = unloaded.p99(), p99_loaded = loaded.p99();
  nlohmann::json report = {
      {"test", "slow_senders"}, {"connections", connections}, {"seconds", seconds},
      {"drip_ms", drip_every.count()}, {"requests_unloaded", unloaded.latencies_s.size()},
      {"requests_loaded", loaded.latencies_s.size()}, {"failed", loaded.failed + unloaded.failed},
      {"p99_unloaded_ms", p99_unloaded * 1e3}, {"p99_loaded_ms", p99_loaded * 1e3},
      {"drip_answered_408", answered_408.load()}, {"drip_reconnects", reconnects.load()},
      {"drip_open_min", open_min.load()}};
  std::printf("%s\n", report.dump().c_str());
  if (const char* path = std::getenv("FS_SLOW_REPORT")) std::ofstream(path, std::ios::app) << report.dump() << "\n";

  EXPECT_EQ(unloaded.failed, 0);
  EXPECT_EQ(loaded.failed, 0) << "the normal client lost requests";
  EXPECT_GT(loaded.latencies_s.size(), 10u);
  EXPECT_LE(p99_loaded, 2 * p99_unloaded + 0.005);
  EXPECT_GE(open_min.load(), long(connections) * 9 / 10) << "the drip connections were not held";
  EXPECT_GT(answered_408.load(), 0) << "no head deadline was reached";
  EXPECT_EQ(http::request(port, "GET", "/health").status, 200);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace flashserve::testing
