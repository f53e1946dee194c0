// Sockets with poll() deadlines; a frame is [u32 type][u32 bytes][bytes], little-endian as the
// hosts are (every node runs the same build: the rendezvous checks it).
#include "parallel/tcp_link.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace flashserve {
namespace {

constexpr uint32_t kMaxFrame = 64u << 20;  // a plan is kilobytes; more is a broken peer

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return int(std::max<int64_t>(0, left.count()));
}

addrinfo* resolve(const std::string& addr, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_INET;  // the group's addresses are IPv4 (pod IPs, loopback)
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const bool any = addr.empty() || addr == "0.0.0.0";
  const int rc = getaddrinfo(any ? nullptr : addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  FS_CHECK(rc == 0 && res, "cannot resolve ", addr, ":", port, ": ", gai_strerror(rc));
  return res;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small frames go at once
}

// Reads exactly n bytes; false on a closed socket, an error or the deadline (`why` says which).
bool read_exact(int fd, void* dst, size_t n, Clock::time_point deadline, std::string* why) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    const int r = poll(&pf, 1, ms_until(deadline));
    if (r == 0) return *why = "timed out", false;
    if (r < 0 && errno == EINTR) continue;
    const ssize_t got = r < 0 ? -1 : recv(fd, p, n, 0);
    if (got == 0) return *why = "connection closed", false;
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return *why = std::string("connection error: ") + std::strerror(errno), false;
    }
    p += got;
    n -= size_t(got);
  }
  return true;
}

bool read_frame(int fd, Frame* f, Clock::time_point deadline, std::string* why) {
  uint32_t head[2];
  if (!read_exact(fd, head, sizeof head, deadline, why)) return false;
  if (head[1] > kMaxFrame) return *why = "frame of " + std::to_string(head[1]) + " bytes", false;
  f->type = head[0];
  f->payload.resize(head[1]);
  return read_exact(fd, f->payload.data(), head[1], deadline, why);
}

}  // namespace

TcpListener::TcpListener(const std::string& addr, int port) {
  addrinfo* ai = resolve(addr, port, true);
  fd_ = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool ok = fd_ >= 0 && bind(fd_, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd_, 64) == 0;
  const int err = errno;
  freeaddrinfo(ai);
  if (!ok) {
    if (fd_ >= 0) close(fd_);
    FS_THROW("cannot listen on ", addr.empty() ? "*" : addr, ":", port, ": ", std::strerror(err));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.sin_port);
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) close(fd_);
}

int TcpListener::accept_until(Clock::time_point deadline, std::string* peer) {
  for (;;) {
    pollfd pf{fd_, POLLIN, 0};
    const int r = poll(&pf, 1, ms_until(deadline));
    if (r == 0) return -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      FS_THROW("poll on the listener: ", std::strerror(errno));
    }
    sockaddr_in from{};
    socklen_t len = sizeof from;
    const int fd = accept4(fd_, reinterpret_cast<sockaddr*>(&from), &len, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the peer gave up between poll and accept
    set_nodelay(fd);
    char ip[64] = "?";
    getnameinfo(reinterpret_cast<sockaddr*>(&from), len, ip, sizeof ip, nullptr, 0, NI_NUMERICHOST);
    *peer = std::string(ip) + ":" + std::to_string(ntohs(from.sin_port));
    return fd;
  }
}

int tcp_connect_until(const std::string& addr, int port, Clock::time_point deadline) {
  std::string last = "no attempt";
  do {
    addrinfo* ai = nullptr;
    try {
      ai = resolve(addr, port, false);  // a Service's DNS name may appear late: retried too
    } catch (const Error& e) {
      last = e.what();
    }
    if (ai) {
      const int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const bool ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
      last = std::strerror(errno);
      freeaddrinfo(ai);
      if (ok) {
        set_nodelay(fd);
        return fd;
      }
      if (fd >= 0) close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (Clock::now() < deadline);
  FS_THROW("cannot connect to ", addr, ":", port, " before the deadline (", last, ")");
}

Link::Link(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

Link::~Link() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  shutdown(fd_, SHUT_RDWR);  // the reader's poll returns
  if (reader_.joinable()) reader_.join();
  if (beater_.joinable()) beater_.join();
  close(fd_);
}

void Link::send(uint32_t type, const void* data, size_t bytes) {
  FS_CHECK(bytes <= kMaxFrame, "frame of ", bytes, " bytes");
  const uint32_t head[2] = {type, uint32_t(bytes)};
  if (type == kBye) {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;  // the peer closing after this is the end, not a failure
  }
  std::lock_guard<std::mutex> lock(send_mu_);
  for (auto [p, n] : {std::pair{static_cast<const char*>(static_cast<const void*>(head)), sizeof head},
                      std::pair{static_cast<const char*>(data), bytes}}) {
    while (n > 0) {
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        fail(std::string("send failed: ") + std::strerror(errno));
        std::lock_guard<std::mutex> lock(mu_);
        FS_THROW("link to ", peer_, ": ", reason_);  // the first failure's reason
      }
      p += w;
      n -= size_t(w);
    }
  }
}

Frame Link::read_until(Clock::time_point deadline) {
  Frame f;
  std::string why;
  if (!read_frame(fd_, &f, deadline, &why)) FS_THROW(peer_, ": ", why);
  return f;
}

void Link::start(std::chrono::milliseconds timeout,
                 std::function<void(const std::string&)> on_failure) {
  on_failure_ = std::move(on_failure);
  reader_ = std::thread([this, timeout] { read_loop(timeout); });
  beater_ = std::thread([this, timeout] { beat_loop(timeout / 4); });
}

void Link::read_loop(std::chrono::milliseconds timeout) {
  for (;;) {
    Frame f;
    std::string why;
    // Any frame proves the peer alive; the heartbeat makes sure one comes within the timeout.
    if (!read_frame(fd_, &f, Clock::now() + timeout, &why)) {
      if (why == "timed out")
        why = "no heartbeat for " + std::to_string(timeout.count()) + " ms (hung or unreachable)";
      fail(why);
      return;
    }
    if (f.type == kHeartbeat) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (f.type == kBye) stop_ = true;  // the peer's closing that follows fails nothing
    queue_.push_back(std::move(f));
    cv_.notify_all();
  }
}

void Link::beat_loop(std::chrono::milliseconds period) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_ && !failed_) {
    lock.unlock();
    try {
      send(kHeartbeat, nullptr, 0);
    } catch (const Error&) {
      return;  // send() failed the link
    }
    lock.lock();
    cv_.wait_for(lock, period, [&] { return stop_ || failed_; });
  }
}

bool Link::next(Frame* f) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || failed_; });
  if (queue_.empty()) return false;
  *f = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void Link::fail(const std::string& reason) {
  std::function<void(const std::string&)> notify;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    failed_ = true;
    reason_ = reason;
    if (!stop_) notify = on_failure_;  // a link being closed on purpose reports nothing
  }
  cv_.notify_all();
  shutdown(fd_, SHUT_RDWR);
  if (notify) notify(peer_ + ": " + reason);
}

bool Link::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

}  // namespace flashserve
