// TCP between the nodes of a multi-host group (docs/DEPLOY.md, "Several hosts"): a listener, a
// connect that retries until a deadline, and Link: one connection carrying framed messages plus a
// heartbeat each way, so that a peer that died (connection closed) or hangs (no frame within the
// heartbeat timeout) is noticed by a watcher thread, which then calls the link's failure callback
// once. Blocking reads and writes of a failed link end (the socket is shut down).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flashserve {

using Clock = std::chrono::steady_clock;

// A listening socket on addr:port (port 0: any free port; addr "" or "0.0.0.0": every address).
class TcpListener {
 public:
  TcpListener(const std::string& addr, int port);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  int port() const { return port_; }
  // The next connection, or -1 when the deadline passed first. `peer` gets "ip:port".
  int accept_until(Clock::time_point deadline, std::string* peer);

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Connects to addr:port, retrying (the listener may not be up yet) until the deadline; throws then.
int tcp_connect_until(const std::string& addr, int port, Clock::time_point deadline);

struct Frame {
  uint32_t type = 0;
  std::vector<uint8_t> payload;
};

class Link {
 public:
  // Frame types every link knows; users add their own from kUser. kBye: the sender closes the
  // link next, on purpose; it is queued like a user frame, and the closing is no failure.
  static constexpr uint32_t kHeartbeat = 1, kBye = 2, kUser = 16;

  Link(int fd, std::string peer);  // takes the socket
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  const std::string& peer() const { return peer_; }

  // One frame (any thread; frames are never interleaved). Throws when the link failed.
  void send(uint32_t type, const void* data, size_t bytes);
  void send(uint32_t type, const std::string& s) { send(type, s.data(), s.size()); }
  // Before start(): reads one frame on this thread; throws at the deadline or on a closed link.
  Frame read_until(Clock::time_point deadline);

  // Starts the heartbeat (a frame every timeout / 4) and the reader thread, which queues every
  // frame but heartbeats and fails the link when nothing arrived for `timeout` or the peer closed.
  // on_failure(reason) runs once, on the reader thread.
  void start(std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_failure);
  // The next queued frame; false when the link failed (or closed) and none is left.
  bool next(Frame* f);
  // Fails the link (shutting the socket down: blocked reads and writes return); idempotent.
  void fail(const std::string& reason);
  bool failed() const;

 private:
  void read_loop(std::chrono::milliseconds timeout);
  void beat_loop(std::chrono::milliseconds period);

  int fd_;
  const std::string peer_;
  std::mutex send_mu_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Frame> queue_;
  bool failed_ = false, stop_ = false;
  std::string reason_;
  std::function<void(const std::string&)> on_failure_;
  std::thread reader_, beater_;
};

}  // namespace flashserve
