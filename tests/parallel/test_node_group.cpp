// Several hosts, on loopback: the rendezvous and the multi-process rank path.
//
// Rendezvous (nodes as threads of this process): a wrong token, another build, another model or
// configuration (the refusal names the key), a node rank already taken, and a node that never
// comes are each refused with the difference named, on the refused node and in node 0's log,
// and node 0 then gives up at its bound; a matching group forms and its min_over_nodes agrees.
//
// Ranks in two processes (node 1 a forked child running run_tensor_parallel_worker, joined by
// the TCP stand-in communicator): the logits are bitwise those of one process without tensor
// parallelism, for stories260K greedy (1 and 2 ranks per node) and for a random Qwen3 model's
// ragged batch with every row's logits (2 ranks per node: 4 in all). Why the bits are equal:
// test_tensor_parallel_cpu.cpp; the stand-in adds in the same order as the thread one.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "model/model_runner.h"
#include "model/tensor_parallel_runner.h"
#include "parallel/node_group.h"
#include "parallel/tcp_link.h"
#include "tests/model/model_test_util.h"
#include "tests/parallel/tp_test_util.h"

namespace flashserve::test {
namespace {

const std::string kStories = std::string(FS_MODELS_DIR) + "/stories260K";

int free_port() {
  TcpListener l("127.0.0.1", 0);
  return l.port();  // closed again at once; the test's nodes take it next
}

NodeGroupOptions options(int nnodes, int node_rank, int port) {
  NodeGroupOptions o;
  o.nnodes = nnodes;
  o.node_rank = node_rank;
  o.master_addr = "127.0.0.1";
  o.master_port = port;
  o.rendezvous_timeout = std::chrono::milliseconds(1500);
  o.heartbeat_timeout = std::chrono::milliseconds(2000);
  o.identity.token = "secret";
  o.identity.model = "model=m;layers=5;tensor-parallel-size=1";
  return o;
}

// Joins with o and returns the error, or "" when the group formed.
std::string join_error(const NodeGroupOptions& o) {
  try {
    NodeGroup::join(o);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

// Node 0 (its log read back from stderr) beside `others`, each a node's options, on threads.
struct Outcome {
  std::string node0, log;
  std::vector<std::string> others;
};
Outcome rendezvous(int nnodes, std::vector<NodeGroupOptions> others) {
  const int port = others.empty() ? free_port() : others[0].master_port;
  Outcome out;
  out.others.resize(others.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < others.size(); ++i) {
    threads.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50 * int(i)));  // in this order
      out.others[i] = join_error(others[i]);
    });
  }
  ::testing::internal::CaptureStderr();
  out.node0 = join_error(options(nnodes, 0, port));
  out.log = ::testing::internal::GetCapturedStderr();
  for (auto& t : threads) t.join();
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(NodeGroupRendezvous, RefusesWhatDiffersAndNamesIt) {
  const int port = free_port();
  NodeGroupOptions token = options(2, 1, port), build = options(2, 1, port),
                   model = options(2, 1, port);
  token.identity.token = "guess";
  build.identity.build = "flashserve other-revision";
  model.identity.model = "model=m;layers=6;tensor-parallel-size=1";
  const Outcome o = rendezvous(2, {token, build, model});
  EXPECT_TRUE(has(o.others[0], "refused node 1: wrong group token")) << o.others[0];
  EXPECT_TRUE(has(o.others[1], "another build: here " + build_id() + ", there flashserve other-revision"))
      << o.others[1];
  EXPECT_TRUE(has(o.others[2], "another model or configuration: layers: here 5, there 6")) << o.others[2];
  for (const char* line : {"refused a node from 127.0.0.1:", "wrong group token", "another build",
                           "layers: here 5, there 6"})
    EXPECT_TRUE(has(o.log, line)) << line << " not in node 0's log:\n" << o.log;
  EXPECT_FALSE(has(o.log, "guess")) << "the token is never logged";
  // Nobody joined: node 0 gives up at its bound, naming the missing node.
  EXPECT_TRUE(has(o.node0, "rendezvous timed out after 1.5 s: node(s) 1 did not join")) << o.node0;
}

TEST(NodeGroupRendezvous, RankTakenIsRefusedAndTheGroupFormsWithoutIt) {
  const int port = free_port();
  std::string first, second, node2, node0;
  std::thread t1([&] {
    NodeGroupOptions o = options(3, 1, port);
    o.rendezvous_timeout = std::chrono::seconds(10);
    first = join_error(o);
  });
  std::thread t2([&] {  // a second node 1 once node 0 holds the first, then node 2
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    second = join_error(options(3, 1, port));
    NodeGroupOptions o = options(3, 2, port);
    o.rendezvous_timeout = std::chrono::seconds(10);
    node2 = join_error(o);
  });
  NodeGroupOptions o = options(3, 0, port);
  o.rendezvous_timeout = std::chrono::seconds(10);
  node0 = join_error(o);
  t1.join();
  t2.join();
  EXPECT_EQ(node0, "");
  EXPECT_EQ(first, "");
  EXPECT_TRUE(has(second, "node rank 1 is already taken")) << second;
  EXPECT_EQ(node2, "");
}

TEST(NodeGroupRendezvous, NothingStartsHalfJoined) {
  // Node 1 of 3 joins, node 2 never comes: node 1 is told so and fails too.
  NodeGroupOptions node1 = options(3, 1, free_port());
  node1.rendezvous_timeout = std::chrono::seconds(10);  // waits longer than node 0
  const Outcome o = rendezvous(3, {node1});
  EXPECT_TRUE(has(o.node0, "node(s) 2 did not join")) << o.node0;
  EXPECT_TRUE(has(o.others[0], "refused node 1: rendezvous timed out")) << o.others[0];
}

TEST(NodeGroupRendezvous, MinOverNodesAndAStoppedGroup) {
  const int port = free_port();
  int64_t got1 = 0;
  bool more = true;
  std::thread node1([&] {
    auto g = NodeGroup::join(options(2, 1, port));
    g->start();
    got1 = g->min_over_nodes(7);
    std::vector<int32_t> msg;
    EXPECT_TRUE(g->receive(&msg));
    EXPECT_EQ(msg, (std::vector<int32_t>{1, -2, 3}));
    more = g->receive(&msg);  // node 0 ended the group
  });
  {
    auto g = NodeGroup::join(options(2, 0, port));
    g->start();
    EXPECT_EQ(g->min_over_nodes(9), 7);
    const int32_t msg[] = {1, -2, 3};
    g->broadcast(msg);
  }
  node1.join();
  EXPECT_EQ(got1, 7);
  EXPECT_FALSE(more);
}

// ---- ranks in two processes

ModelRunnerOptions runner_options(int tp) {
  ModelRunnerOptions o;
  o.backend = "cpu";
  o.threads = tp;
  o.kv_cache_tokens = 4096;
  o.tensor_parallel_size = tp;
  return o;
}

NodeGroupOptions process_options(int node_rank, int port) {
  NodeGroupOptions o = options(2, node_rank, port);
  o.rendezvous_timeout = std::chrono::seconds(60);
  return o;
}

// Forks node 1: it loads `dir`, joins and runs node 0's steps; exits 0 when node 0 stops the
// group. Call before this process starts threads.
pid_t fork_node1(const std::string& dir, int tp, int port) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  try {
    auto model = load_model(dir);
    auto group = NodeGroup::join(process_options(1, port));
    group->start();
    ModelRunnerOptions o = runner_options(tp);
    o.node_group = group.get();
    run_tensor_parallel_worker(*model, o);
    _exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "node 1: %s\n", e.what());
    _exit(1);
  }
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `run` over node 0's runner of a two-node group (node 1 forked), and over one process alone.
template <class Run>
void expect_same_bits_in_two_processes(const std::string& dir, int tp, Run run) {
  const int port = free_port();
  const pid_t node1 = fork_node1(dir, tp, port);
  ASSERT_GT(node1, 0);
  auto model = load_model(dir);
  std::vector<float> got;
  std::string name;
  {
    auto group = NodeGroup::join(process_options(0, port));
    group->start();
    ModelRunnerOptions o = runner_options(tp);
    o.node_group = group.get();
    auto r = make_tensor_parallel_runner(*model, o);
    name = r->backend_name();
    got = run(*r);
  }  // the runner, then the group: node 1 is told to stop
  EXPECT_EQ(wait_exit(node1), 0) << "node 1 ends cleanly when node 0 stops the group";
  EXPECT_TRUE(has(name, "tcp stand-in") && has(name, "node 0 of 2")) << name;
  ModelRunnerOptions alone = runner_options(1);
  auto ref = ModelRunner::create(*model, alone);
  const std::vector<float> want = run(*ref);
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(same_bits(got, want)) << tp << " ranks per node: max rel diff " << max_rel_diff(got, want);
}

TEST(NodeGroupProcesses, Stories260kSameBitsAsOneProcess) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "model not found: " << kStories;
  for (int tp : {1, 2}) {
    expect_same_bits_in_two_processes(kStories, tp, [](ModelRunner& r) {
      std::vector<float> logits;
      std::vector<int32_t> want = stories260k_greedy_ids();
      want.resize(40);
      EXPECT_EQ(greedy(r, 40, &logits), want);
      return logits;
    });
  }
}


TEST(NodeGroupProcesses, RandomQwen3RaggedBatchSameBitsAsOneProcess) {
  ModelConfig c = small_config(128, 8, 2, 16, /*tied=*/false);  // 4 ranks share 2 KV heads
  set_architecture(c, "Qwen3ForCausalLM");
  const std::string dir = fresh_dir("node_group_qwen3");
  write_random_hf_model(dir, c, 5, DType::kBF16, 2, 0.08f);
  expect_same_bits_in_two_processes(dir, 2, ragged_batch_logits);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace flashserve::test
