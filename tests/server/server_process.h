// ServerProcess: starts the real `flashserve` binary on 127.0.0.1 (--port 0: a free port, read
// back from its "listening on" line) with stories260K on the CPU backend, and stops it with
// SIGTERM, reporting the exit status. Plus small helpers the server tests share.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/common/http_client.h"
#include "tests/common/exec_args.h"

namespace flashserve::testing {

inline std::string model_dir() { return std::string(FS_MODELS_DIR) + "/stories260K"; }
inline std::string server_binary() { return std::string(FS_BINARY_DIR) + "/server/flashserve"; }

class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra_args = {}) {
    char log_template[] = "/tmp/flashserve_test_log_XXXXXX";
    int log_fd = mkstemp(log_template);
    log_path_ = log_template;
    int out[2];
    if (log_fd < 0 || pipe(out) != 0) return;
    std::vector<std::string> args = {server_binary(), "--model", model_dir(), "--port", "0",
                                     "--host", "127.0.0.1", "--backend", "cpu", "--threads", "1"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(log_fd, 2);
      close(out[0]);
      flashserve::test::exec_args(args);
    }
    close(out[1]);
    close(log_fd);
    // Wait (bounded) for "flashserve: listening on http://127.0.0.1:PORT".
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (port_ <= 0 && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char c;
      if (read(out[0], &c, 1) != 1) break;
      if (c != '\n') {
        line.push_back(c);
        continue;
      }
      size_t at = line.find("http://127.0.0.1:");
      if (at != std::string::npos) port_ = std::atoi(line.c_str() + at + 17);
      line.clear();
    }
    stdout_fd_ = out[0];
  }

  ~ServerProcess() {
    if (pid_ > 0) stop();
    if (stdout_fd_ >= 0) close(stdout_fd_);
    if (!log_path_.empty()) unlink(log_path_.c_str());
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool started() const { return port_ > 0; }
  std::string log() const {
    std::ifstream f(log_path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  bool alive() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  // Resident memory of the server in KiB (VmRSS in /proc/PID/status); -1 if it cannot be read.
  long rss_kib() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string key;
    while (f >> key) {
      if (key == "VmRSS:") {
        long value = -1;
        f >> value;
        return value;
      }
      f.ignore(1 << 20, '\n');
    }
    return -1;
  }

  // SIGTERM, then waits (bounded); returns the exit status, or -1 (killed, or a crash).
  int stop(int signal_number = SIGTERM) {
    if (pid_ <= 0) return -1;
    kill(pid_, signal_number);
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  int stdout_fd_ = -1;
  std::string log_path_;
};

// A value from the /metrics page (first sample whose name+labels start with `name`); -1 if absent.
inline double metric(int port, const std::string& name) {
  http::Response r = http::request(port, "GET", "/metrics");
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.compare(0, name.size(), name) == 0 && line.size() > name.size() &&
        (line[name.size()] == ' ' || line[name.size()] == '{')) {
      return std::atof(line.c_str() + line.rfind(' ') + 1);
    }
  }
  return -1;
}

// Polls until `name` == value (bounded); returns the last value seen.
inline double wait_metric(int port, const std::string& name, double value,
                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  double v = metric(port, name);
  while (v != value && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    v = metric(port, name);
  }
  return v;
}

struct StreamResult {
  int status = 0;
  std::string text;                     // concatenated deltas of choice 0
  std::vector<nlohmann::json> chunks;   // every data: payload but [DONE]
  bool done = false;                    // ended with [DONE]
  std::string finish_reason;
};

// POSTs a streaming request to `path` and reads the SSE answer. Choice 0's deltas are its "text"
// (/v1/completions) or its "delta"."content" (/v1/chat/completions).
inline StreamResult stream_post(int port, const std::string& path, const nlohmann::json& body) {
  StreamResult s;
  http::Response r = http::request(port, "POST", path, body.dump());
  s.status = r.status;
  for (const auto& d : http::sse_data(r.body)) {
    if (d == "[DONE]") {
      s.done = true;
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(d);
    s.chunks.push_back(j);
    if (!j.contains("choices")) continue;
    for (const auto& c : j["choices"]) {
      if (c["index"] != 0) continue;
      const bool chat = c.contains("delta");
      const nlohmann::json& delta = chat ? c["delta"] : c;
      const char* key = chat ? "content" : "text";
      if (delta.contains(key)) s.text += delta[key].get<std::string>();
      if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
    }
  }
  return s;
}

inline StreamResult stream_completion(int port, const nlohmann::json& body) {
  return stream_post(port, "/v1/completions", body);
}

inline nlohmann::json complete(int port, const nlohmann::json& body, int* status = nullptr) {
  http::Response r = http::request(port, "POST", "/v1/completions", body.dump());
  if (status) *status = r.status;
  return nlohmann::json::parse(r.body, nullptr, false);
}

}  // namespace flashserve::testing
