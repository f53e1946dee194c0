// Hostile clients against the real `flashserve` binary through raw sockets (one slow, odd or
// malicious client must not starve, confuse or get past the server): slow senders, pipelining,
// connection caps, control characters and the API key, errors before the body, chunked bodies,
// 405 + Allow, and more open sockets than select() can watch. docs/SERVER.md, "Connections".
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/fault/fault_util.h"

namespace flashserve::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const std::string kBody = R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})";

std::string post(const std::string& body, const std::string& extra_headers = "") {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n" + extra_headers + "\r\n" + body;
}

// True when the server has closed `fd` (EOF) within `limit`, after whatever it still sent.
bool closed_within(int fd, std::chrono::milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
  return false;
}

// Every "HTTP/1.1 NNN" status line in `raw`, in order (bodies here never contain one).
std::vector<int> statuses(const std::string& raw) {
  std::vector<int> out;
  for (size_t at = raw.find("HTTP/1.1 "); at != std::string::npos; at = raw.find("HTTP/1.1 ", at + 1)) {
    out.push_back(std::atoi(raw.c_str() + at + 9));
  }
  return out;
}

TEST(FaultHostile, SlowSendersDoNotStarveOthers) {
  // 300 clients (from 6 addresses, 50 each) drip a request head one byte every 300 ms. None
  // of them holds a thread; each gets 408 when the head deadline (1 s here) passes; meanwhile
  // /health and completions from another client answer at once.
  ASSERT_GT(raise_fd_limit(), 700);
  ServerProcess server({"--http-threads", "4", "--request-head-timeout-ms", "1000"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  std::vector<int> drips;
  for (int i = 0; i < 300; ++i) {
    const std::string ip = "127.0.0." + std::to_string(2 + i / 50);
    int fd = raw_connect_from(port, ip.c_str());
    ASSERT_GE(fd, 0) << i;
    drips.push_back(fd);
  }
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n";
  std::atomic<bool> stop{false};
  std::thread dripper([&] {
    for (size_t k = 0; k < head.size() && !stop; ++k) {
      for (int fd : drips) send(fd, &head[k], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      std::this_thread::sleep_for(300ms);
    }
  });
  double worst = 0;
  for (int i = 0; i < 10; ++i) {
    auto t0 = Clock::now();
    EXPECT_EQ(http::request(port, "GET", "/health").status, 200);
    EXPECT_EQ(http::request(port, "POST", "/v1/completions", kBody).status, 200);
    worst = std::max(worst, since(t0));
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_LT(worst, 1.0) << "a normal client waited behind the slow senders";
  // Every drip connection was answered 408 and closed by the head deadline.
  int timed_out = 0;
  for (int fd : drips) {
    const std::string got = raw_read_all(fd, 3000ms);
    timed_out += raw_status(got) == 408;
  }
  stop = true;
  dripper.join();
  for (int fd : drips) close(fd);
  EXPECT_EQ(timed_out, 300);
  std::printf("300 slow senders: normal /health + completion worst %.3f s; %d got 408\n", worst,
              timed_out);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, HealthAndMetricsAnswerWhileEveryWorkerIsBusy) {
  // Two request workers, both busy with long completions: a third completion is refused with
  // 503 + Retry-After at once, and /health and /metrics (served by a reserved worker) answer.
  ServerProcess server({"--http-threads", "2", "--max-num-seqs", "64"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  const std::string longer =
      R"({"prompt":"Once","max_tokens":400,"n":32,"ignore_eos":true,"temperature":1,"seed":1})";
  std::vector<int> busy;
  for (int i = 0; i < 2; ++i) {
    int fd = raw_connect(port, 60000);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(raw_send(fd, post(longer)));
    busy.push_back(fd);
  }
  // Both are in the engine (64 choices, running or waiting) once their workers hold them.
  const auto until = Clock::now() + 10s;
  while (metric(port, "flashserve_requests_running") + metric(port, "flashserve_requests_waiting") <
             64 && Clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_LT(Clock::now(), until) << "the two long requests did not start";
  auto t0 = Clock::now();
  http::Response refused = http::request(port, "POST", "/v1/completions", kBody);
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_LT(since(t0), 1.0);
  for (const char* path : {"/health", "/metrics"}) {
    t0 = Clock::now();
    EXPECT_EQ(http::request(port, "GET", path).status, 200) << path;
    EXPECT_LT(since(t0), 1.0) << path;
  }
  EXPECT_GT(metric(port, "flashserve_requests_running"), 0) << "the long ones are still running";
  for (int fd : busy) close(fd);  // hang up: their engine requests are cancelled
  EXPECT_EQ(wait_metric(port, "flashserve_kv_blocks_used", 0, 5000ms), 0);
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", kBody).status, 200);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, ConnectionCapsAnswer503AndClose) {
  ServerProcess server({"--max-connections-per-client", "4", "--max-connections", "8"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  std::vector<int> held;
  raw_connect_many(port, "127.0.0.2", 4, held);
  std::this_thread::sleep_for(100ms);  // the acceptor has counted them
  // A fifth from the same address: 503 and closed at once.
  int fd = raw_connect_from(port, "127.0.0.2");
  ASSERT_GE(fd, 0);
  auto t0 = Clock::now();
  std::string got = raw_read_all(fd, 2000ms);
  close(fd);
  EXPECT_EQ(raw_status(got), 503) << got;
  EXPECT_NE(got.find("Retry-After: 1"), std::string::npos);
  EXPECT_NE(got.find("Connection: close"), std::string::npos);
  EXPECT_LT(since(t0), 1.0);
  // Another address still gets in, up to the total cap of 8.
  raw_connect_many(port, "127.0.0.3", 4, held);
  std::this_thread::sleep_for(100ms);
  fd = raw_connect_from(port, "127.0.0.4");
  got = raw_read_all(fd, 2000ms);
  close(fd);
  EXPECT_EQ(raw_status(got), 503) << "over the total cap: " << got;
  // Closing some frees room again.
  for (int h : held) close(h);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(http::request(port, "GET", "/health").status, 200);
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", kBody).status, 200);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, PipelinedRequestsAreAnsweredInOrder) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  const std::string stream = R"({"prompt":"Once","max_tokens":6,"temperature":0,"stream":true})";
  // A stream, a health check, a completion: all written at once on one connection.
  for (bool close_last : {true, false}) {
    int fd = raw_connect(port);
    ASSERT_GE(fd, 0);
    const auto t0 = Clock::now();
    ASSERT_TRUE(raw_send(fd, post(stream) + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
                                 post(kBody, close_last ? "Connection: close\r\n" : "")));
    std::string got;
    if (close_last) {
      got = raw_read_all(fd, 5000ms);  // ends when the server closes after the third
    } else {
      // Kept alive: the three answers arrive at once (read until the third body is in).
      while (statuses(got).size() < 3 || got.rfind("\"usage\"") < got.rfind("HTTP/1.1 ")) {
        std::string more = raw_read_response(fd, 200ms);
        if (more.empty() && since(t0) > 5) break;
        got += more;
      }
    }
    close(fd);
    EXPECT_LT(since(t0), 3.0) << "answers held back";
    EXPECT_EQ(statuses(got), (std::vector<int>{200, 200, 200})) << got;
    const size_t done = got.find("data: [DONE]"), health = got.find("{\"status\":\"ok\"}"),
                 completion = got.find("\"object\":\"text_completion\"", health);
    EXPECT_TRUE(done != std::string::npos && health != std::string::npos &&
                completion != std::string::npos && done < health && health < completion)
        << got;
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, ControlCharactersAndTheApiKey) {
  const std::string key = "k3y-0123456789";
  ServerProcess server({"--api-key", key});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  auto status_with = [&](const std::string& header_lines) {
    int fd = raw_connect(port);
    raw_send(fd, "GET /v1/models HTTP/1.1\r\nHost: x\r\n" + header_lines + "\r\n");
    const std::string got = raw_read_response(fd, 2000ms);
    close(fd);
    return raw_status(got);
  };
  const std::string auth = "Authorization: Bearer ";
  EXPECT_EQ(status_with(auth + key + "\r\n"), 200);
  EXPECT_EQ(status_with(auth + key + std::string("\0anything", 9) + "\r\n"), 400) << "NUL";
  EXPECT_EQ(status_with(auth + key + "\x01\r\n"), 400) << "SOH";
  EXPECT_EQ(status_with(auth + key + "\x7f\r\n"), 400) << "DEL";
  EXPECT_EQ(status_with("X-Other: a\rb\r\n" + auth + key + "\r\n"), 400) << "bare CR";
  EXPECT_EQ(status_with("X-Other: a\nb\r\n" + auth + key + "\r\n"), 400) << "bare LF";
  EXPECT_EQ(status_with(auth + key.substr(0, key.size() - 1) + "\r\n"), 401) << "prefix";
  EXPECT_EQ(status_with(auth + key + "0\r\n"), 401) << "longer";
  EXPECT_EQ(status_with(auth + key + " \r\n"), 200) << "trailing space is not part of a value";
  EXPECT_EQ(status_with("Authorization: bearer " + key + "\r\n"), 401) << "scheme case";
  EXPECT_EQ(status_with("Authorization: BEARER " + key + "\r\n"), 401) << "scheme case";
  EXPECT_EQ(status_with("Authorization: Bearer\r\n"), 401) << "no key";
  EXPECT_EQ(status_with(auth + key + "\r\n" + auth + "other\r\n"), 401) << "two keys";
  EXPECT_EQ(status_with("Bad Name: x\r\n" + auth + key + "\r\n"), 400) << "space in name";
  // A 400 of the front closes the connection at once.
  int fd = raw_connect(port);
  raw_send(fd, "GET /v1/models HTTP/1.1\r\nX: \x01\r\n\r\n");
  const auto t0 = Clock::now();
  const std::string got = raw_read_all(fd, 3000ms);
  close(fd);
  EXPECT_EQ(raw_status(got), 400);
  EXPECT_NE(got.find("Connection: close"), std::string::npos);
  EXPECT_LT(since(t0), 1.0) << "held open after the 400";
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, ErrorsBeforeTheBodyCloseAtOnce) {
  ServerProcess server({"--max-body-bytes", "4096"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  struct Case {
    const char* name;
    std::string raw;
    int status;
  };
  const std::vector<Case> cases = {
      {"no length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n" + kBody, 411},
      {"no length, no body", "POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 411},
      {"unparsable", "HELLO THERE\r\n\r\n", 400},
      {"bad version", "GET /health HTTP/2.7\r\n\r\n", 505},
      {"too large", "POST /v1/completions HTTP/1.1\r\nContent-Length: 999999\r\n\r\n{", 413},
      {"length and chunked", "POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
      // 1-byte chunks with 250-byte extensions: the framing fills the connection's buffer while
      // the body stays under the limit.
      {"chunk framing over the buffer", [] {
         std::string r = "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
         for (int i = 0; i < 400; ++i) r += "1;" + std::string(250, 'e') + "\r\nX\r\n";
         return r;
       }(), 413},
  };
  for (const Case& c : cases) {
    int fd = raw_connect(port);
    const auto t0 = Clock::now();
    raw_send(fd, c.raw);
    const std::string got = raw_read_all(fd, 3000ms);  // returns when the server closes
    close(fd);
    EXPECT_EQ(raw_status(got), c.status) << c.name << ": " << got;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << c.name;
    EXPECT_NE(got.find("\"error\""), std::string::npos) << c.name;
    EXPECT_LT(since(t0), 1.0) << c.name << ": the connection stayed open";
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, ChunkedBodiesAndExpectContinueWork) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  std::string chunked = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  for (size_t i = 0; i < kBody.size(); i += 7) {
    const std::string part = kBody.substr(i, 7);
    char size[16];
    std::snprintf(size, sizeof size, "%zx;ext=1\r\n", part.size());
    chunked += size + part + "\r\n";
  }
  chunked += "0\r\nX-Trailer: t\r\n\r\n";
  int fd = raw_connect(port);
  raw_send(fd, chunked);
  std::string got = raw_read_all(fd, 5000ms);
  close(fd);
  EXPECT_EQ(raw_status(got), 200) << got;
  const std::string plain = http::request(port, "POST", "/v1/completions", kBody).body;
  EXPECT_EQ(nlohmann::json::parse(got.substr(got.find("\r\n\r\n") + 4))["choices"][0]["text"],
            nlohmann::json::parse(plain)["choices"][0]["text"]);
  // Expect: 100-continue: the server says "100 Continue" before the client sends the body.
  fd = raw_connect(port);
  raw_send(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
                   std::to_string(kBody.size()) + "\r\nConnection: close\r\n\r\n");
  got = raw_read_response(fd, 2000ms);
  EXPECT_EQ(raw_status(got), 100) << got;
  raw_send(fd, kBody);
  got = raw_read_all(fd, 5000ms);
  close(fd);
  EXPECT_EQ(raw_status(got), 200) << got;
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, WrongMethodIs405WithAllow) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  for (const char* method : {"GET", "OPTIONS", "PUT", "DELETE"}) {
    http::Response r = http::request(port, method, "/v1/completions", "{}");
    EXPECT_EQ(r.status, 405) << method;
    EXPECT_EQ(r.headers["allow"], "POST") << method;
    EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["code"], "method_not_allowed");
  }
  http::Response r = http::request(port, "POST", "/health", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  EXPECT_EQ(http::request(port, "GET", "/v2/nothing").status, 404);
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", kBody).status, 200);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

TEST(FaultHostile, SocketsBeyondFdSetSizeAreServed) {
  // cpp-httplib (built with select()) answers 500 for a socket numbered >= 1024; the server
  // reads sockets itself, so the 1100th connection is served like the first.
  if (raise_fd_limit() < 2400) GTEST_SKIP() << "open-file limit below 2400";
  ServerProcess server({"--max-connections-per-client", "0"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  std::vector<int> idle;
  for (int i = 0; i < 1100; ++i) {
    int fd = raw_connect(port);
    ASSERT_GE(fd, 0) << i;
    idle.push_back(fd);
  }
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", kBody).status, 200);
  EXPECT_EQ(http::request(port, "GET", "/health").status, 200);
  // And on one of the held connections, whose socket on the server is >= 1024 too.
  ASSERT_TRUE(raw_send(idle.back(), post(kBody, "Connection: close\r\n")));
  EXPECT_EQ(raw_status(raw_read_all(idle.back(), 5000ms)), 200);
  for (int fd : idle) close(fd);
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace flashserve::testing
