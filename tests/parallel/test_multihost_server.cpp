// The `flashserve` binary as a group of two nodes on loopback (--nnodes 2; CPU backends joined by
// the TCP stand-in): node 0 serves what one process serves, and a worker that dies or hangs
// mid-stream gives the failure behaviour of docs/RELIABILITY.md within the heartbeat bound: the
// stream in flight ends with a node_group_lost error, a request in flight gets 503, /health is
// never 200 again, node 0 exits 1 and so does the worker once it runs again.
#include <gtest/gtest.h>

#include <fcntl.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double kHeartbeatS = 1.0;  // --heartbeat-timeout of both nodes
constexpr double kMarginS = 3.0;     // the failure is handled and the process ends within this

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> group_args(int node_rank, int port) {
  return {"--nnodes", "2", "--node-rank", std::to_string(node_rank), "--master-addr", "127.0.0.1",
          "--master-port", std::to_string(port), "--heartbeat-timeout", "1",
          "--rendezvous-timeout", "60", "--kv-cache-tokens", "4096"};
}

// Node 1: the same binary and model, its stderr in a file.
class Worker {
 public:
  explicit Worker(int port) {
    char path[] = "/tmp/flashserve_worker_log_XXXXXX";
    const int fd = mkstemp(path);
    log_path_ = path;
    std::vector<std::string> args = {server_binary(), "--model", model_dir(), "--backend", "cpu",
                                     "--threads", "1"};
    for (const std::string& a : group_args(1, port)) args.push_back(a);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fd, 2);
      flashserve::test::exec_args(args);
    }
    close(fd);
  }
  ~Worker() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      kill(pid_, SIGCONT);
      waitpid(pid_, nullptr, 0);
    }
    unlink(log_path_.c_str());
  }
  pid_t pid() const { return pid_; }
  // Waits up to `seconds` for the exit; its status, or -1 (still running, or killed).
  int wait_exit(double seconds) {
    const auto end = Clock::now() + std::chrono::milliseconds(int(seconds * 1000));
    int status = 0;
    while (Clock::now() < end) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string log() const {
    std::ifstream f(log_path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// Whether the process ended (a zombie) within `seconds`; its status stays for ServerProcess::stop.
bool ends_within(pid_t pid, double seconds) {
  const auto end = Clock::now() + std::chrono::milliseconds(int(seconds * 1000));
  while (Clock::now() < end) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = all.rfind(')');
    if (paren == std::string::npos || all.compare(paren + 2, 1, "Z") == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Node 1 first: node 0 starts listening for HTTP only once the group formed.
struct Group {
  int port = free_port();
  Worker worker{port};
  ServerProcess node0{group_args(0, port)};
};

class MultiHostServer : public ::testing::Test {
 protected:
  void SetUp() override { setenv("FLASHSERVE_GROUP_TOKEN", "test-token", 1); }
};

TEST_F(MultiHostServer, ServesAsOneProcess) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  json want;
  {
    ServerProcess alone({"--kv-cache-tokens", "4096"});
    ASSERT_TRUE(alone.started()) << alone.log();
    want = complete(alone.port(), body);
  }
  Group g;
  ASSERT_TRUE(g.node0.started()) << g.node0.log() << g.worker.log();
  int status = 0;
  const json got = complete(g.node0.port(), body, &status);
  EXPECT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["choices"], want["choices"]);
  EXPECT_NE(g.node0.log().find("node 0 of 2 (2 ranks in all)"), std::string::npos) << g.node0.log();
  EXPECT_EQ(g.node0.stop(), 0);
  EXPECT_EQ(g.worker.wait_exit(kMarginS), 0) << "node 0's clean stop ends node 1 cleanly\n"
                                             << g.worker.log();
}

// A stream of `max_tokens`; `on_first` runs at its first event. Returns the body.
std::string stream_and(int port, int max_tokens, const std::function<void()>& on_first) {
  bool first = true;
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", max_tokens},
                     {"temperature", 0}, {"stream", true}};
  http::Response r = http::request(port, "POST", "/v1/completions", body.dump(), {},
                                   [&](std::string_view) {
                                     if (first) on_first();
                                     first = false;
                                     return true;
                                   });
  return r.body;
}

TEST_F(MultiHostServer, KilledWorkerMidStream) {
  Group g;
  ASSERT_TRUE(g.node0.started()) << g.node0.log() << g.worker.log();
  Clock::time_point killed;
  const std::string body = stream_and(g.node0.port(), 480, [&] {
    kill(g.worker.pid(), SIGKILL);
    killed = Clock::now();
  });
  const double took = seconds_since(killed);
  EXPECT_LT(took, kHeartbeatS + kMarginS) << "the stream ended " << took << " s after the kill";
  EXPECT_NE(body.find("node_group_lost"), std::string::npos) << body.substr(body.size() - 400);
  EXPECT_TRUE(ends_within(g.node0.pid(), kHeartbeatS + kMarginS)) << g.node0.log();
  EXPECT_EQ(g.node0.stop(), 1);
  EXPECT_NE(g.node0.log().find("node group lost: node 1"), std::string::npos) << g.node0.log();
}

TEST_F(MultiHostServer, StoppedWorkerFailsTheGroupWithinTheHeartbeat) {
  Group g;
  ASSERT_TRUE(g.node0.started()) << g.node0.log() << g.worker.log();
  std::atomic<int> in_flight_status{-1};
  std::string in_flight_body;
  std::thread in_flight;
  Clock::time_point stopped;
  const std::string body = stream_and(g.node0.port(), 480, [&] {
    kill(g.worker.pid(), SIGSTOP);
    stopped = Clock::now();
    in_flight = std::thread([&] {  // a request that arrives while the group hangs
      http::Response r = http::request(g.node0.port(), "POST", "/v1/completions",
                                       json{{"prompt", "Lily"}, {"max_tokens", 8}}.dump());
      in_flight_body = r.body;
      in_flight_status = r.status;
    });
  });
  const double took = seconds_since(stopped);
  in_flight.join();
  EXPECT_GE(took, kHeartbeatS * 0.9) << "a hang is noticed by the heartbeat, not sooner";
  EXPECT_LT(took, kHeartbeatS + kMarginS) << "the stream ended " << took << " s after SIGSTOP";
  EXPECT_NE(body.find("node_group_lost"), std::string::npos) << body.substr(body.size() - 400);
  EXPECT_EQ(in_flight_status.load(), 503) << in_flight_body;
  // /health: 503 or gone (the server is exiting), never 200 again.
  const http::Response health = http::request(g.node0.port(), "GET", "/health");
  EXPECT_NE(health.status, 200) << health.body;
  EXPECT_TRUE(ends_within(g.node0.pid(), kMarginS)) << g.node0.log();
  EXPECT_EQ(g.node0.stop(), 1);
  kill(g.worker.pid(), SIGCONT);  // it finds node 0 gone and fails too
  EXPECT_EQ(g.worker.wait_exit(kHeartbeatS + kMarginS), 1) << g.worker.log();
  EXPECT_NE(g.worker.log().find("node failed"), std::string::npos) << g.worker.log();
}

TEST_F(MultiHostServer, WrongTokenIsRefusedAndNothingStarts) {
  const int port = free_port();
  setenv("FLASHSERVE_GROUP_TOKEN", "another-token", 1);
  Worker intruder(port);
  setenv("FLASHSERVE_GROUP_TOKEN", "test-token", 1);
  std::vector<std::string> args = group_args(0, port);
  args.insert(args.end(), {"--rendezvous-timeout", "2"});  // the last one counts
  ServerProcess node0(args);
  EXPECT_FALSE(node0.started());
  EXPECT_EQ(intruder.wait_exit(kMarginS), 1);
  EXPECT_NE(intruder.log().find("node 0 refused node 1: wrong group token"), std::string::npos)
      << intruder.log();
  EXPECT_EQ(node0.stop(), 1);
  EXPECT_NE(node0.log().find("wrong group token"), std::string::npos) << node0.log();
  EXPECT_NE(node0.log().find("node(s) 1 did not join"), std::string::npos) << node0.log();
}

TEST_F(MultiHostServer, NoTokenIsAUsageError) {
  unsetenv("FLASHSERVE_GROUP_TOKEN");
  ServerProcess node0(group_args(0, free_port()));
  setenv("FLASHSERVE_GROUP_TOKEN", "test-token", 1);
  EXPECT_FALSE(node0.started());
  EXPECT_EQ(node0.stop(), 2);
  EXPECT_NE(node0.log().find("needs the group's shared secret in FLASHSERVE_GROUP_TOKEN"),
            std::string::npos) << node0.log();
}

}  // namespace
}  // namespace flashserve::testing
