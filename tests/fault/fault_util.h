// Helpers for the fault tests: run a program to completion with a time limit (for start-up
// failures), spawn `flashserve` with exactly the given flags (ServerProcess always adds --host),
// raw-socket helpers for clients that misbehave, and a /proc/net/tcp lookup of listening sockets.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/exec_args.h"
#include "tests/server/server_process.h"

namespace flashserve::testing {

struct RunResult {
  int exit_code = -1;   // -1: killed by a signal or by the time limit
  bool timed_out = false;
  std::string output;   // stdout and stderr together
};

// Runs argv[0] with argv, waits at most `limit`, returns its exit status and output.
inline RunResult run_program(std::vector<std::string> args, std::chrono::seconds limit) {
  RunResult r;
  int out[2];
  if (pipe(out) != 0) return r;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(out[0]);
    flashserve::test::exec_args(args);
  }
  close(out[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  bool exited = false;
  for (;;) {
    char buf[4096];
    ssize_t n;
    while ((n = read(out[0], buf, sizeof buf)) > 0) r.output.append(buf, size_t(n));
    if (exited) break;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      continue;  // one more read for what is left in the pipe
    }
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  close(out[0]);
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

// A connected socket to 127.0.0.1:port with a receive timeout; -1 on failure.
inline int raw_connect(int port, int recv_timeout_ms = 10000, int rcvbuf = 0) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  timeval tv{recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// raw_connect from a chosen loopback source address (any 127.x.y.z works on Linux), so that a
// test can play several clients as the per-client connection cap sees them. Non-blocking
// connect is not needed on loopback.
inline int raw_connect_from(int port, const char* source_ip, int recv_timeout_ms = 10000) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{recv_timeout_ms / 1000, (recv_timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, source_ip, &src.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof src) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// `n` connections from `source_ip` (-1 for any that failed), appended to `fds`.
inline void raw_connect_many(int port, const char* source_ip, int n, std::vector<int>& fds) {
  for (int i = 0; i < n; ++i) fds.push_back(raw_connect_from(port, source_ip));
}

// Raises this process's soft open-file limit to the hard one; returns the new soft limit.
// (Tests that hold hundreds of sockets; the soft limit is often 1024.)
inline long raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return -1;
  r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_NOFILE, &r);
  getrlimit(RLIMIT_NOFILE, &r);
  return long(r.rlim_cur);
}

inline bool raw_send(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(size_t(n));
  }
  return true;
}

// What the server sends until `done(what arrived)` holds, the server closes, or `limit` passes.
inline std::string raw_read_until(int fd, std::chrono::milliseconds limit,
                                  const std::function<bool(const std::string&)>& done) {
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline && !done(out)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}

// Everything the server sends until it closes the connection or `limit` passes.
inline std::string raw_read_all(int fd, std::chrono::milliseconds limit) {
  return raw_read_until(fd, limit, [](const std::string&) { return false; });
}

// Reads until one whole response (headers and Content-Length body) is in, the server closes, or
// `limit` passes; returns what arrived.
inline std::string raw_read_response(int fd, std::chrono::milliseconds limit) {
  return raw_read_until(fd, limit, [](const std::string& out) {
    const size_t head = out.find("\r\n\r\n");
    if (head == std::string::npos) return false;
    const size_t cl = out.find("Content-Length: ");
    const size_t want = cl < head ? size_t(std::atol(out.c_str() + cl + 16)) : 0;
    return out.size() >= head + 4 + want;
  });
}

// The status code of the first HTTP response in `raw` (0 when there is none).
inline int raw_status(const std::string& raw) {
  if (raw.compare(0, 9, "HTTP/1.1 ") != 0) return 0;
  return std::atoi(raw.c_str() + 9);
}

// Local addresses (hex, as /proc/net/tcp writes them, e.g. "0100007F") of sockets listening
// on `port`.
inline std::vector<std::string> listening_addresses(int port) {
  std::vector<std::string> out;
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st;
      f >> sl >> local >> remote >> st;
      size_t colon = local.find(':');
      if (colon == std::string::npos || st != "0A") continue;  // 0A = LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) out.push_back(local.substr(0, colon));
    }
  }
  return out;
}

}  // namespace flashserve::testing
