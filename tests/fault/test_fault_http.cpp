// Misbehaving HTTP clients against the real binary (label server): malformed request lines,
// headers and chunked bodies; random bytes; a client that sends byte by byte; idle connections
// holding every handler thread; a client that never reads its stream. Each must get an error
// status or a closed connection (never a crash or a 500), and must not keep resources: the
// server answers normal requests afterwards and its KV blocks return to 0.
// (Oversized Content-Length bodies, bad JSON and API keys are in tests/server/test_server_errors.)
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <random>
#include <set>

#include "tests/fault/fault_util.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

bool healthy(int port) { return http::request(port, "GET", "/health").status == 200; }

int ok_completion(int port) {
  return http::request(port, "POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":4})").status;
}

// Sends `raw` on a fresh connection and returns the status of the answer (0: none within `wait`,
// or closed unanswered). With `half_close` the client then shuts down its sending side; the
// server (and cpp-httplib itself) treats that as a hang-up and answers nothing.
int send_raw(int port, const std::string& raw, std::chrono::milliseconds wait = 2000ms,
             bool half_close = false) {
  int fd = raw_connect(port);
  if (fd < 0) return -1;
  raw_send(fd, raw);
  if (half_close) shutdown(fd, SHUT_WR);
  int status = raw_status(raw_read_response(fd, wait));
  close(fd);
  return status;
}

TEST(FaultHttp, MalformedRequestsGetAnErrorOrAClose) {
  ServerProcess server({"--max-body-bytes", "4096"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  const std::string post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  const std::string body = R"({"prompt":"Hi","max_tokens":2})";
  struct Case {
    std::string name, raw;
    std::set<int> allowed;  // 0 = connection closed without an answer
  };
  const std::vector<Case> cases = {
      {"garbage line", "GARBAGE\r\n\r\n", {0, 400}},
      {"no path", "GET\r\n\r\n", {0, 400}},
      {"bad version", "GET /health HTTP/9.9\r\n\r\n", {0, 400, 505}},
      {"NUL in line", std::string("GET /hea\0lth HTTP/1.1\r\n\r\n", 25), {0, 400, 404}},
      {"header without colon", "GET /health HTTP/1.1\r\nthis is not a header\r\n\r\n", {0, 400, 200}},
      {"content-length not a number", post + "Content-Length: abc\r\n\r\n" + body, {0, 400}},
      {"content-length negative", post + "Content-Length: -5\r\n\r\n" + body, {0, 400}},
      {"content-length huge", post + "Content-Length: 99999999999999999999\r\n\r\n" + body,
       {0, 400, 413}},
      {"content-length over the limit", post + "Content-Length: 5000\r\n\r\n" + body, {0, 413}},
      {"content-length longer than the body", post + "Content-Length: 500\r\n\r\n" + body, {0, 400}},
      {"URI too long", "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\n\r\n", {0, 400, 414}},
      {"header too long", "GET /health HTTP/1.1\r\nX-A: " + std::string(20000, 'b') + "\r\n\r\n",
       {0, 400, 431}},
      {"chunk size not hex", post + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", {0, 400}},
      {"chunk size overflows", post + "Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\nab\r\n",
       {0, 400, 413}},
      {"chunk size negative", post + "Transfer-Encoding: chunked\r\n\r\n-1\r\nab\r\n0\r\n\r\n", {0, 400}},
      {"chunk without CRLF", post + "Transfer-Encoding: chunked\r\n\r\n5\r\nabcdefgh0\r\n\r\n", {0, 400}},
      {"chunk longer than sent", post + "Transfer-Encoding: chunked\r\n\r\n100\r\nabc", {0, 400}},
      {"chunked body over the limit",
       post + "Transfer-Encoding: chunked\r\n\r\n" + [] {
         std::string s;
         for (int i = 0; i < 10; ++i) s += "3e8\r\n" + std::string(1000, ' ') + "\r\n";
         return s + "0\r\n\r\n";
       }(), {0, 400, 413}},  // cpp-httplib 0.11 answers 400 here (413 with Content-Length)
      {"chunked bad JSON", post + "Transfer-Encoding: chunked\r\n\r\n3\r\n{\"p\r\n0\r\n\r\n", {400}},
      {"unknown transfer encoding", post + "Transfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
       {0, 400, 501}},
  };
  for (const Case& c : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const int status = send_raw(port, c.raw);
    std::printf("%-36s -> %d (%.2f s)\n", c.name.c_str(), status,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_TRUE(c.allowed.count(status)) << c.name << ": status " << status;
    ASSERT_TRUE(server.alive()) << c.name << "\n" << server.log();
    ASSERT_TRUE(healthy(port)) << "after " << c.name;
  }
  // A well-formed chunked request is served.
  std::string chunked = post + "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n";
  for (size_t i = 0; i < body.size(); i += 7) {
    std::string part = body.substr(i, 7);
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", part.size());
    chunked += size + part + "\r\n";
  }
  EXPECT_EQ(send_raw(port, chunked + "0\r\n\r\n", 10000ms), 200);
  // The same request from a client that half-closes after sending: taken as a hang-up, so the
  // request is cancelled and answered 499 (which a half-closed client can still read) or not at
  // all, unless the (2-token) completion finished before the server noticed (200); in every case
  // nothing hangs.
  const int half_closed = send_raw(port, chunked + "0\r\n\r\n", 2000ms, /*half_close=*/true);
  EXPECT_TRUE(half_closed == 0 || half_closed == 200 || half_closed == 499) << half_closed;
  EXPECT_EQ(ok_completion(port), 200);
  EXPECT_EQ(metric(port, "flashserve_http_requests_total{status=\"500\"}"), -1) << "no 500s";
  EXPECT_EQ(server.stop(), 0) << server.log();
}

// The listening socket queues a burst of connects (cpp-httplib alone would listen with a backlog
// of 5, and a burst of clients beyond it waits for SYN retries: 1 s, 3 s, 7 s). `ss` shows a
// listening socket's backlog in its Send-Q column.
TEST(FaultHttp, ListenBacklogTakesABurstOfClients) {
  ServerProcess server({"--no-request-log"});
  ASSERT_TRUE(server.started()) << server.log();
  FILE* p = popen(("ss -Hltn 'sport = :" + std::to_string(server.port()) + "' 2>/dev/null").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[512] = {0};
  const bool got = fgets(line, sizeof line, p) != nullptr;
  pclose(p);
  if (!got) GTEST_SKIP() << "ss (iproute2) not available";
  std::istringstream f(line);
  std::string state;
  long recv_q = 0, backlog = 0;
  f >> state >> recv_q >> backlog;
  long somaxconn = 4096;
  std::ifstream("/proc/sys/net/core/somaxconn") >> somaxconn;
  EXPECT_EQ(state, "LISTEN");
  EXPECT_EQ(backlog, std::min(4096L, somaxconn)) << line;
}

TEST(FaultHttp, RandomBytesDoNotHurt) {
  ServerProcess server({"--no-request-log"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  const std::vector<std::string> prefixes = {
      "", "POST /v1/completions HTTP/1.1\r\n", "GET /metrics HTTP/1.1\r\n",
      "POST /v1/completions HTTP/1.1\r\nContent-Length: 40\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"};
  std::atomic<int> answered{0}, closed{0}, five_hundreds{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      for (int i = 0; i < 25; ++i) {
        std::string raw = prefixes[rng() % prefixes.size()];
        const size_t n = rng() % 4096;
        for (size_t k = 0; k < n; ++k) raw.push_back(char(rng() & 0xff));
        const int status = send_raw(port, raw, 300ms);
        status == 0 ? ++closed : ++answered;
        if (status >= 500) ++five_hundreds;
      }
    });
  }
  for (auto& th : threads) th.join();
  std::printf("random bytes: %d answered, %d closed\n", answered.load(), closed.load());
  EXPECT_EQ(five_hundreds, 0);
  ASSERT_TRUE(server.alive()) << server.log();
  EXPECT_TRUE(healthy(port));
  EXPECT_EQ(ok_completion(port), 200);
  EXPECT_EQ(metric(port, "flashserve_kv_blocks_used"), 0);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHttp, ByteByByteClientIsServed) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const std::string body = R"({"prompt":"Once","max_tokens":8,"temperature":0})";
  const std::string raw = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          "application/json\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\nConnection: close\r\n\r\n" + body;
  int fd = raw_connect(server.port());
  ASSERT_GE(fd, 0);
  for (char c : raw) {  // ~150 bytes, 10 ms apart: slow, but within every timeout
    ASSERT_TRUE(raw_send(fd, std::string_view(&c, 1)));
    std::this_thread::sleep_for(10ms);
  }
  const std::string answer = raw_read_all(fd, 10000ms);
  close(fd);
  EXPECT_EQ(raw_status(answer), 200) << answer;
  EXPECT_NE(answer.find("\"choices\""), std::string::npos);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHttp, StalledClientsHoldNoThreadAndAreTimedOut) {
  // Two handler threads and two clients that send half a request and stall. Requests are read
  // whole before a thread sees them, so a normal request is served at once; the stalled ones
  // get 408 when the body deadline passes (2 s here) and are closed.
  ServerProcess server({"--http-threads", "2", "--request-body-timeout-ms", "2000"});
  ASSERT_TRUE(server.started()) << server.log();
  std::vector<int> stalled;
  for (int i = 0; i < 2; ++i) {
    int fd = raw_connect(server.port(), 20000);
    ASSERT_GE(fd, 0);
    raw_send(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\"");
    stalled.push_back(fd);
  }
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ok_completion(server.port()), 200);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 1.0);
  for (int fd : stalled) {
    const auto t1 = std::chrono::steady_clock::now();
    std::string rest = raw_read_all(fd, 15000ms);
    EXPECT_LT(std::chrono::steady_clock::now() - t1, 4000ms) << "stalled connection still open";
    EXPECT_EQ(raw_status(rest), 408) << rest;
    close(fd);
  }
  std::printf("normal request served after %.2f s beside 2 stalled clients\n", waited);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHttp, ClientThatNeverReadsItsStreamIsCancelled) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  // A long stream (64 choices x 480 tokens, megabytes of events) into a 4 KiB receive buffer
  // that is never read: the server's writes block, time out, and the request is cancelled.
  json body = {{"prompt", "Once upon a time"}, {"max_tokens", 480}, {"n", 64},
               {"ignore_eos", true}, {"temperature", 1}, {"seed", 3}, {"stream", true}};
  int fd = raw_connect(port, 60000, 4096);
  ASSERT_GE(fd, 0);
  const std::string b = body.dump();
  ASSERT_TRUE(raw_send(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           "application/json\r\nContent-Length: " + std::to_string(b.size()) +
                           "\r\n\r\n" + b));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (metric(port, "flashserve_kv_blocks_used") <= 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_GT(metric(port, "flashserve_kv_blocks_used"), 0);
  // Blocks come back while the client still holds its connection open.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(wait_metric(port, "flashserve_kv_blocks_used", 0, 60000ms), 0);
  const double freed_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(metric(port, "flashserve_generation_tokens_total"), 64 * 480) << "it ran to the end";
  EXPECT_GE(metric(port, "flashserve_client_disconnects_total"), 1);
  std::printf("blocks of the non-reading client freed after %.1f s\n", freed_after);
  close(fd);
  EXPECT_EQ(ok_completion(port), 200);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace flashserve::testing
