// NodeGroup: the rendezvous (hello, refusal or welcome), the control links and the messages
// node 0 sends over them.
#include "parallel/node_group.h"

#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "core/error.h"

namespace flashserve {
namespace {

// Frame types of the control links (tcp_link.h's Link::kUser and up).
enum : uint32_t {
  kHello = Link::kUser,  // node -> node 0: its identity
  kRefuse,               // node 0 -> node: why it is not admitted (text); the link closes
  kWelcome,              // node 0 -> node: every node joined; the communicators' group id
  kPlan,                 // node 0 -> node: one message of broadcast()
  kValue,                // either way: min_over_nodes
};

void log(const std::string& line) { std::fprintf(stderr, "flashserve: rendezvous: %s\n", line.c_str()); }

// Fields as [u32 bytes][bytes], in order.
std::string pack_fields(const std::vector<std::string>& fields) {
  std::string out;
  for (const std::string& f : fields) {
    const uint32_t n = uint32_t(f.size());
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += f;
  }
  return out;
}

std::vector<std::string> unpack_fields(const std::vector<uint8_t>& p) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 4 <= p.size()) {
    uint32_t n;
    std::memcpy(&n, p.data() + at, 4);
    at += 4;
    if (n > p.size() - at) break;
    out.emplace_back(reinterpret_cast<const char*>(p.data() + at), n);
    at += n;
  }
  return out;
}

bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() ^ b.size());
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

// "key=value;..." -> the first key whose value differs, as "key: here X, there Y".
std::string first_difference(const std::string& here, const std::string& there) {
  auto split = [](const std::string& s) {
    std::vector<std::pair<std::string, std::string>> kv;
    size_t at = 0;
    while (at < s.size()) {
      size_t end = s.find(';', at);
      if (end == std::string::npos) end = s.size();
      const std::string item = s.substr(at, end - at);
      const size_t eq = item.find('=');
      kv.emplace_back(item.substr(0, eq), eq == std::string::npos ? "" : item.substr(eq + 1));
      at = end + 1;
    }
    return kv;
  };
  const auto a = split(here), b = split(there);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string key = i < a.size() ? a[i].first : b[i].first;
    const std::string x = i < a.size() ? a[i].second : "(none)";
    const std::string y = i < b.size() && b[i].first == key ? b[i].second : "(none)";
    if (x != y) return key + ": here " + x + ", there " + y;
  }
  return "";
}

}  // namespace

std::unique_ptr<NodeGroup> NodeGroup::join(const NodeGroupOptions& o) {
  FS_CHECK(o.nnodes >= 2, "a node group needs --nnodes >= 2, got ", o.nnodes);
  FS_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "--node-rank ", o.node_rank,
           " is not in 0..", o.nnodes - 1);
  FS_CHECK(!o.identity.token.empty(), "a node group needs a shared token (FLASHSERVE_GROUP_TOKEN)");
  std::unique_ptr<NodeGroup> g(new NodeGroup(o));
  const Clock::time_point deadline = Clock::now() + o.rendezvous_timeout;
  const std::string bound = str_cat(double(o.rendezvous_timeout.count()) / 1000, " s");

  if (o.node_rank > 0) {
    const int fd = tcp_connect_until(o.master_addr, o.master_port, deadline);
    auto link = std::make_unique<Link>(fd, o.master_addr + ":" + std::to_string(o.master_port));
    link->send(kHello, pack_fields({std::to_string(o.node_rank), std::to_string(o.nnodes),
                                    o.identity.token, o.identity.build, o.identity.model}));
    Frame f;
    try {
      f = link->read_until(deadline);
    } catch (const Error& e) {
      FS_THROW("rendezvous: node 0 did not welcome node ", o.node_rank, " within ", bound, " (",
               e.what(), ")");
    }
    if (f.type == kRefuse)
      FS_THROW("rendezvous: node 0 refused node ", o.node_rank, ": ",
               std::string(f.payload.begin(), f.payload.end()));
    FS_CHECK(f.type == kWelcome, "rendezvous: unexpected frame ", f.type, " from node 0");
    g->group_id_.assign(f.payload.begin(), f.payload.end());
    g->links_.push_back(std::move(link));
    return g;
  }

  TcpListener listener(o.master_addr, o.master_port);
  log("node 0 of " + std::to_string(o.nnodes) + " waiting on " + o.master_addr + ":" +
      std::to_string(listener.port()) + " (up to " + bound + ")");
  g->links_.resize(size_t(o.nnodes - 1));
  int joined = 0;
  while (joined < o.nnodes - 1) {
    std::string peer;
    const int fd = listener.accept_until(deadline, &peer);
    if (fd < 0) break;
    auto link = std::make_unique<Link>(fd, peer);
    std::vector<std::string> h;
    try {  // a hello is due at once: a silent connection waits at most 5 s
      const Frame f = link->read_until(std::min(deadline, Clock::now() + std::chrono::seconds(5)));
      if (f.type == kHello) h = unpack_fields(f.payload);
    } catch (const Error& e) {
      log("ignored a connection from " + peer + ": " + e.what());
      continue;
    }
    std::string why;
    int rank = -1;
    if (h.size() != 5) {
      why = "not a flashserve node (no valid hello)";
    } else if (!same_secret(h[2], o.identity.token)) {
      why = "wrong group token";
    } else if (h[3] != o.identity.build) {
      why = "another build: here " + o.identity.build + ", there " + h[3];
    } else if (h[1] != std::to_string(o.nnodes)) {
      why = "another --nnodes: here " + std::to_string(o.nnodes) + ", there " + h[1];
    } else if (rank = std::atoi(h[0].c_str()); rank < 1 || rank >= o.nnodes) {
      why = "--node-rank " + h[0] + " is not in 1.." + std::to_string(o.nnodes - 1);
    } else if (g->links_[size_t(rank - 1)]) {
      why = "node rank " + h[0] + " is already taken (by " + g->links_[size_t(rank - 1)]->peer() + ")";
    } else if (std::string d = first_difference(o.identity.model, h[4]); !d.empty()) {
      why = "another model or configuration: " + d;
    }
    if (!why.empty()) {
      log("refused a node from " + peer + ": " + why);
      try {
        link->send(kRefuse, why);
      } catch (const Error&) {
      }
      continue;
    }
    log("node " + std::to_string(rank) + " joined from " + peer);
    g->links_[size_t(rank - 1)] = std::move(link);
    ++joined;
  }
  if (joined < o.nnodes - 1) {
    std::string missing;
    for (int r = 1; r < o.nnodes; ++r)
      if (!g->links_[size_t(r - 1)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    const std::string why = "rendezvous timed out after " + bound + ": node(s) " + missing +
                            " did not join";
    for (auto& l : g->links_) {
      if (!l) continue;
      try {
        l->send(kRefuse, why);
      } catch (const Error&) {
      }
    }
    FS_THROW(why);
  }
  if (o.nccl) {
    g->group_id_ = nccl_unique_id();
  } else {
    g->hub_ = std::make_unique<TcpListener>(o.master_addr, 0);
    g->group_id_ = std::to_string(g->hub_->port()) + " " + std::to_string(std::random_device{}());
  }
  for (auto& l : g->links_) l->send(kWelcome, g->group_id_);
  log("all " + std::to_string(o.nnodes) + " nodes joined");
  return g;
}

NodeGroup::~NodeGroup() {
  set_on_failure(nullptr);
  if (o_.node_rank == 0) {
    for (auto& l : links_) {
      if (!l || l->failed()) continue;
      try {
        l->send(Link::kBye, nullptr, 0);  // the group ends cleanly
      } catch (const Error&) {
      }
    }
  }
  links_.clear();
}

std::vector<std::unique_ptr<Communicator>> NodeGroup::make_communicators(int local_ranks) {
  const int world = o_.nnodes * local_ranks, first = o_.node_rank * local_ranks;
  if (o_.nccl) return make_nccl_group(group_id_, world, first, local_ranks);
  const size_t space = group_id_.find(' ');
  FS_CHECK(space != std::string::npos, "stand-in group id '", group_id_, "'");
  const int port = std::atoi(group_id_.c_str());
  const uint64_t nonce = std::stoull(group_id_.substr(space + 1));
  return make_tcp_standin_group(hub_.get(), o_.master_addr, port, nonce, world, first,
                                local_ranks, Clock::now() + o_.rendezvous_timeout);
}

void NodeGroup::start() {
  for (auto& l : links_) {
    const int node = o_.node_rank == 0 ? int(&l - links_.data()) + 1 : 0;
    l->start(o_.heartbeat_timeout, [this, node](const std::string& reason) {
      failed_with("node " + std::to_string(node) + " (" + reason + ")");
    });
  }
}

void NodeGroup::set_on_failure(std::function<void(const std::string&)> fn) {
  std::lock_guard<std::mutex> lock(callback_mu_);
  on_failure_ = std::move(fn);
  if (on_failure_ && failed()) on_failure_(failure());
}

void NodeGroup::failed_with(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return;
    failure_ = std::string(kNodeGroupLost) + ": " + reason;
  }
  std::fprintf(stderr, "flashserve: %s\n", failure().c_str());
  for (auto& l : links_) l->fail("the group failed");  // every node learns it at once
  std::lock_guard<std::mutex> lock(callback_mu_);
  if (on_failure_) on_failure_(failure());
}

bool NodeGroup::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !failure_.empty();
}

bool NodeGroup::confirms_failure() const {
  const Clock::time_point end = Clock::now() + o_.heartbeat_timeout;
  while (!failed() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return failed();
}

std::string NodeGroup::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void NodeGroup::broadcast(std::span<const int32_t> msg) {
  FS_CHECK(o_.node_rank == 0, "broadcast from node ", o_.node_rank);
  FS_CHECK(!failed(), failure());
  for (auto& l : links_) l->send(kPlan, msg.data(), msg.size_bytes());
}

bool NodeGroup::receive(std::vector<int32_t>* msg) {
  FS_CHECK(o_.node_rank > 0, "receive on node 0");
  Frame f;
  if (!links_[0]->next(&f)) FS_THROW(failed() ? failure() : "the link to node 0 closed");
  if (f.type == Link::kBye) {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = "stopped by node 0";  // node 0 closing its end next is the end, not a failure
    return false;
  }
  FS_CHECK(f.type == kPlan && f.payload.size() % 4 == 0, "unexpected frame ", f.type, " from node 0");
  msg->resize(f.payload.size() / 4);
  std::memcpy(msg->data(), f.payload.data(), f.payload.size());
  return true;
}

int64_t NodeGroup::min_over_nodes(int64_t v) {
  auto value = [&](Link& l) {
    Frame f;
    if (!l.next(&f)) FS_THROW(failed() ? failure() : "link to " + l.peer() + " closed");
    FS_CHECK(f.type == kValue && f.payload.size() == 8, "unexpected frame ", f.type, " from ", l.peer());
    int64_t x;
    std::memcpy(&x, f.payload.data(), 8);
    return x;
  };
  if (o_.node_rank > 0) {
    links_[0]->send(kValue, &v, 8);
    return value(*links_[0]);
  }
  for (auto& l : links_) v = std::min(v, value(*l));
  for (auto& l : links_) l->send(kValue, &v, 8);
  return v;
}

}  // namespace flashserve
