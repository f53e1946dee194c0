// NodeGroup: one process per host, all of them ranks of one model (docs/DEPLOY.md, "Several
// hosts"). Node 0 listens on --master-addr:--master-port; every other node connects and presents
// its identity (the shared token, the model and parallel configuration, the build). Node 0
// refuses, with a log line naming the difference, a node whose identity differs or whose node
// rank is taken, and welcomes the others only once all --nnodes joined within the rendezvous
// bound: nothing starts half joined. The connections stay as the group's control links: node 0
// sends each step's plan over them, and a heartbeat each way notices a node that died or hangs
// (docs/RELIABILITY.md, "Several hosts").
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/tcp_link.h"

namespace flashserve {

// What must be the same on every node. `model` is "key=value;key=value": the refusal names the
// first key that differs. The token is compared in constant time and never logged or sent back.
struct NodeIdentity {
  std::string token;  // the shared secret (FLASHSERVE_GROUP_TOKEN)
  std::string model;  // the model's shape and the parallel configuration
  std::string build = build_id();
};

struct NodeGroupOptions {
  int nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds rendezvous_timeout{120000};  // all nodes joined and welcomed by then
  std::chrono::milliseconds heartbeat_timeout{10000};    // silence that fails a link
  bool nccl = false;  // the ranks' communicators: NCCL (GPUs), else the TCP stand-in (CPU tests)
  NodeIdentity identity;
};

class NodeGroup {
 public:
  // The rendezvous. Throws (naming why: refused, timed out, unreachable) when the group did not
  // form; then nothing else was started on any node.
  static std::unique_ptr<NodeGroup> join(const NodeGroupOptions& o);
  ~NodeGroup();  // node 0: tells the other nodes to stop (their worker loop ends, exit 0)

  int nnodes() const { return o_.nnodes; }
  int node_rank() const { return o_.node_rank; }

  // The communicators of this node's `local_ranks` ranks (global ranks node_rank * local_ranks
  // + 0..local_ranks-1 of nnodes * local_ranks). A collective call: every node makes it at once.
  std::vector<std::unique_ptr<Communicator>> make_communicators(int local_ranks);

  // Starts the heartbeats. When a link fails (a node died, hung, or closed the group), failed()
  // becomes true, every other node's link is closed too (the whole group restarts), and every
  // call below throws or returns false. failure() begins with kNodeGroupLost.
  void start();
  bool failed() const;
  std::string failure() const;
  // Whether the group fails within one heartbeat timeout: after a collective's error, which
  // may come a moment before the lost node's link says so.
  bool confirms_failure() const;
  static constexpr const char* kNodeGroupLost = "node group lost";
  // fn(failure()) runs once, on a link's thread, when the group fails (at once when it already
  // has); null removes it, waiting for a call in progress: after that it is never called.
  void set_on_failure(std::function<void(const std::string&)> fn);

  // Node 0: one message to every other node, in the order sent.
  void broadcast(std::span<const int32_t> msg);
  // Other nodes: node 0's next message; false when node 0 stopped the group. Throws when the
  // link failed.
  bool receive(std::vector<int32_t>* msg);
  // Every node: the smallest `v` of all nodes (node 0 collects and answers).
  int64_t min_over_nodes(int64_t v);

 private:
  explicit NodeGroup(const NodeGroupOptions& o) : o_(o) {}
  void failed_with(const std::string& reason);

  NodeGroupOptions o_;
  std::vector<std::unique_ptr<Link>> links_;  // node 0: [nnodes - 1] node 1.. ; others: [1] node 0
  std::unique_ptr<TcpListener> hub_;          // node 0, stand-in: where the ranks connect
  std::string group_id_;                      // NCCL's unique id or the stand-in's "port nonce"
  mutable std::mutex mu_;
  std::string failure_;
  std::mutex callback_mu_;  // held while on_failure_ runs, and to change it
  std::function<void(const std::string&)> on_failure_;
};

}  // namespace flashserve
