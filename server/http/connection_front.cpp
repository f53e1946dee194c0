// ConnectionFront (see connection_front.h). Ownership is simple on purpose: the acceptor thread
// alone creates, counts, reads and closes connections; a worker borrows one (its fd only) for
// the time of one request and hands it back through a locked list and an eventfd wake-up.
#include "server/http/connection_front.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "server/http/worker_pool.h"

namespace flashserve {

using Clock = std::chrono::steady_clock;
using State = ParsedRequest::State;

namespace {

constexpr int kListenBacklog = 4096;  // pending connections the kernel may queue (capped by somaxconn)
constexpr int kLingerMs = 500;        // after an error reply: read and drop what the client still sends
constexpr int kSendBufferBytes = 256 * 1024;  // per accepted socket (see accept_new)

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

std::string peer_address(const sockaddr_storage& a) {
  char host[NI_MAXHOST] = {0};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), sizeof a, host, sizeof host, nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return "?";
  }
  return host;
}

}  // namespace

bool write_all(int fd, const char* data, size_t size, int timeout_ms) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      size -= size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, timeout_ms) <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
      continue;
    }
    return false;
  }
  return true;
}

std::string error_response(int status, const std::string& json_body,
                           const std::vector<std::string>& extra_headers) {
  std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
  r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(json_body.size()) +
       "\r\nConnection: close\r\n";
  for (const auto& h : extra_headers) r += h + "\r\n";
  r += "\r\n" + json_body;
  return r;
}

struct ConnectionFront::Impl {
  enum class Phase { kIdle, kHead, kBody, kLinger };
  struct Conn {
    int fd = -1;
    std::string client;  // peer address (the per-client cap's key)
    std::string in;      // received and not yet consumed (may hold pipelined requests)
    Phase phase = Phase::kIdle;
    Clock::time_point deadline;
    bool busy = false;  // a worker serves it; the acceptor leaves it alone
    bool sent_continue = false;
    int served = 0;
  };

  ConnectionFrontOptions options;
  ServeRequest serve;
  ErrorBody error_body;
  int listen_fd = -1;
  int wake_fd = -1;
  int port = -1;
  std::atomic<bool> stopping{false};

  // Acceptor thread only.
  std::unordered_map<int, std::unique_ptr<Conn>> conns;
  std::unordered_map<std::string, int> per_client;
  Clock::time_point accept_paused_until;

  // Workers -> acceptor.
  std::mutex returned_mu;
  std::vector<std::pair<int, bool>> returned;  // fd, keep open

  std::unique_ptr<WorkerPool> workers, reserved;

  Impl(ConnectionFrontOptions o, ServeRequest s, ErrorBody e)
      : options(std::move(o)), serve(std::move(s)), error_body(std::move(e)) {
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~Impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  bool bind() {
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    const std::string service = std::to_string(options.port);
    if (getaddrinfo(options.host.c_str(), service.c_str(), &hints, &res) != 0) return false;
    for (addrinfo* a = res; a && listen_fd < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      // SO_REUSEADDR (a quick restart over TIME_WAIT) but not SO_REUSEPORT, which would let a
      // second process bind the same port and take part of the traffic.
      int yes = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, kListenBacklog) == 0) {
        listen_fd = fd;
      } else {
        ::close(fd);
      }
    }
    freeaddrinfo(res);
    if (listen_fd < 0) return false;
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    getsockname(listen_fd, reinterpret_cast<sockaddr*>(&local), &len);
    port = local.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    return true;
  }

  void close_conn(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    if (--per_client[it->second->client] == 0) per_client.erase(it->second->client);
    conns.erase(it);
    ::close(fd);
  }

  // Answers an error the front found itself, then reads and drops what the client still sends
  // for a moment before closing (closing with unread input would reset the connection, and a
  // reset can destroy the answer before the client reads it).
  void reject(Conn& c, int status, const std::string& message,
              const std::vector<std::string>& extra = {}) {
    const std::string r = error_response(status, error_body(status, message), extra);
    write_all(c.fd, r.data(), r.size(), 0);
    ::shutdown(c.fd, SHUT_WR);
    c.in.clear();
    c.phase = Phase::kLinger;
    c.deadline = Clock::now() + std::chrono::milliseconds(kLingerMs);
  }

  void set_idle(Conn& c) {
    c.phase = Phase::kIdle;
    c.sent_continue = false;
    c.deadline = Clock::now() + std::chrono::milliseconds(options.limits.idle_timeout_ms);
  }

  void accept_new() {
    for (int i = 0; i < 256; ++i) {
      sockaddr_storage peer{};
      socklen_t len = sizeof peer;
      int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: the listener would stay readable and spin this loop; the
          // connections wait in the kernel's queue meanwhile.
          std::fprintf(stderr, "[flashserve] accept: %s; pausing accepts for 100 ms\n",
                       std::strerror(errno));
          accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
        }
        return;
      }
      const std::string client = peer_address(peer);
      const auto& lim = options.limits;
      const bool over_total = int(conns.size()) >= lim.max_connections;
      const bool over_client = lim.max_connections_per_client > 0 && per_client.count(client) &&
                               per_client[client] >= lim.max_connections_per_client;
      if (over_total || over_client) {
        const std::string msg = over_total
            ? "Too many open connections to this server; retry later"
            : "Too many open connections from your address (" + client + "); retry later";
        const std::string r = error_response(503, error_body(503, msg), {"Retry-After: 1"});
        write_all(fd, r.data(), r.size(), 0);
        ::shutdown(fd, SHUT_WR);
        ::close(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE events go out at once
      // A fixed send buffer instead of the kernel's auto-tuned one (up to tcp_wmem's 4 MiB):
      // a client that stops reading blocks our writes after this much, so the write timeout
      // cancels its request soon, and a crowd of such clients cannot pin gigabytes of kernel
      // memory. Ample for token streams.
      int sndbuf = kSendBufferBytes;
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
      auto c = std::make_unique<Conn>();
      c->fd = fd;
      c->client = client;
      set_idle(*c);
      ++per_client[client];
      conns.emplace(fd, std::move(c));
    }
  }

  // The most a connection may have buffered: a whole request of the largest size, with room for
  // chunk framing. A request still incomplete at this size is refused (413), so a full buffer
  // never leaves a readable socket that the poll loop would spin on.
  size_t input_cap() const {
    return options.limits.request.max_head_bytes + 2 * options.limits.request.max_body_bytes + 65536;
  }

  // Reads what the socket has, at most 1 MiB per call (so one fast sender cannot hold the
  // acceptor); false when the connection is finished (EOF, error).
  bool read_some(Conn& c) {
    char buf[65536];
    for (size_t got = 0; got < (1u << 20) && (c.in.size() < input_cap() || c.phase == Phase::kLinger);) {
      ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        got += size_t(n);
        if (c.phase != Phase::kLinger) c.in.append(buf, size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return true;
  }

  // Looks at what a connection has received: answers an error, waits for more, or hands a
  // complete request to a worker.
  void advance(Conn& c) {
    if (c.phase == Phase::kLinger || c.busy) return;
    if (c.in.empty()) return;
    ParsedRequest p = read_request(c.in, options.limits.request);
    const auto now = Clock::now();
    if ((p.state == State::kNeedHead || p.state == State::kNeedBody) && c.in.size() >= input_cap()) {
      return reject(c, 413, "Request too large (chunk framing included)");
    }
    switch (p.state) {
      case State::kNeedHead:
        if (c.phase == Phase::kIdle) {
          c.phase = Phase::kHead;
          c.deadline = now + std::chrono::milliseconds(options.limits.head_timeout_ms);
        }
        return;
      case State::kNeedBody:
        if (c.phase != Phase::kBody) {
          c.phase = Phase::kBody;
          c.deadline = now + std::chrono::milliseconds(options.limits.body_timeout_ms);
        }
        if (p.expect_continue && !c.sent_continue) {
          static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
          write_all(c.fd, kContinue, sizeof kContinue - 1, 0);
          c.sent_continue = true;
        }
        return;
      case State::kError:
        return reject(c, p.status, p.message);
      case State::kComplete:
        break;
    }
    c.in.erase(0, p.consumed);
    const bool last = ++c.served >= options.limits.max_requests_per_connection || stopping.load();
    bool is_reserved = false;
    if (p.method == "GET") {
      for (const auto& path : options.reserved_paths) is_reserved = is_reserved || p.path == path;
    }
    const int fd = c.fd;
    auto job = [this, fd, last, request = std::move(p.request)] {
      bool keep = false;
      try {
        keep = serve(fd, request, last) && !last;
      } catch (...) {  // serve() answers its own errors; this only keeps the worker alive
      }
      {
        std::lock_guard<std::mutex> lock(returned_mu);
        returned.emplace_back(fd, keep);
      }
      wake();
    };
    c.busy = true;
    WorkerPool& pool = is_reserved ? *reserved : *workers;
    if (!pool.try_post(std::move(job))) {
      c.busy = false;
      reject(c, 503, "Every request worker is busy; retry later", {"Retry-After: 1"});
    }
  }

  void take_returned() {
    uint64_t n;
    [[maybe_unused]] ssize_t r = ::read(wake_fd, &n, sizeof n);
    std::vector<std::pair<int, bool>> back;
    {
      std::lock_guard<std::mutex> lock(returned_mu);
      back.swap(returned);
    }
    for (auto [fd, keep] : back) {
      auto it = conns.find(fd);
      if (it == conns.end()) continue;
      Conn& c = *it->second;
      c.busy = false;
      if (!keep || stopping.load()) {
        close_conn(fd);
        continue;
      }
      set_idle(c);
      advance(c);  // a pipelined request may be waiting in c.in already
    }
  }

  // The worker threads start with the listener, before the port is announced: hundreds of
  // threads take a while to start (seconds under ThreadSanitizer), and the first clients must
  // not wait for that.
  void start_workers() {
    workers = std::make_unique<WorkerPool>(std::max(options.workers, 1), /*may_queue=*/false);
    reserved = std::make_unique<WorkerPool>(std::max(options.reserved_workers, 1), /*may_queue=*/true);
  }

  void run() {
    std::vector<pollfd> fds;
    while (!stopping.load()) {
      const auto now = Clock::now();
      fds.clear();
      fds.push_back({wake_fd, POLLIN, 0});
      const bool accepting = now >= accept_paused_until;
      fds.push_back({accepting ? listen_fd : -1, POLLIN, 0});
      auto next = now + std::chrono::seconds(1);
      for (auto& [fd, c] : conns) {
        if (c->busy) continue;
        fds.push_back({fd, POLLIN, 0});
        next = std::min(next, c->deadline);
      }
      if (!accepting) next = std::min(next, accept_paused_until);
      const int wait_ms = int(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
      if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
      if (fds[0].revents) take_returned();
      if (fds[1].revents & POLLIN) accept_new();
      for (size_t i = 2; i < fds.size(); ++i) {
        if (!fds[i].revents) continue;
        auto it = conns.find(fds[i].fd);
        if (it == conns.end() || it->second->busy) continue;
        Conn& c = *it->second;
        if (!read_some(c)) {
          close_conn(c.fd);
          continue;
        }
        advance(c);
      }
      // Deadlines.
      const auto t = Clock::now();
      std::vector<int> expired;
      for (auto& [fd, c] : conns) {
        if (!c->busy && t >= c->deadline) expired.push_back(fd);
      }
      for (int fd : expired) {
        Conn& c = *conns[fd];
        if (c.phase == Phase::kHead || c.phase == Phase::kBody) {
          reject(c, 408, c.phase == Phase::kHead
                             ? "The request head did not arrive within " +
                                   std::to_string(options.limits.head_timeout_ms) + " ms"
                             : "The request body did not arrive within " +
                                   std::to_string(options.limits.body_timeout_ms) + " ms");
        } else {
          close_conn(fd);
        }
      }
    }
    // Stopping: no new connections; idle ones close now, busy ones when their worker is done.
    ::close(listen_fd);
    listen_fd = -1;
    workers->shutdown();
    reserved->shutdown();
    take_returned();
    std::vector<int> left;
    for (auto& [fd, c] : conns) left.push_back(fd);
    for (int fd : left) close_conn(fd);
  }
};

ConnectionFront::ConnectionFront(ConnectionFrontOptions options, ServeRequest serve,
                                 ErrorBody error_body)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(serve), std::move(error_body))) {}

ConnectionFront::~ConnectionFront() = default;

bool ConnectionFront::bind() {
  if (impl_->bind()) {
    impl_->start_workers();
    return true;
  }
  std::fprintf(stderr, "[flashserve] cannot listen on %s:%d: %s\n", impl_->options.host.c_str(),
               impl_->options.port, std::strerror(errno));
  return false;
}

int ConnectionFront::port() const { return impl_->port; }
void ConnectionFront::run() { impl_->run(); }
void ConnectionFront::stop() {
  impl_->stopping = true;
  impl_->wake();
}

}  // namespace flashserve
