// The bridge between ConnectionFront and cpp-httplib: one complete request as an httplib::Stream
// (reads from the buffered request, writes to the socket), httplib::Server used only for its
// parser, router and response writer, and a handler's view of the client's socket
// (ClientConnection). Only http_server.cpp and httplib_bridge.cpp include httplib.h.
#pragma once

#include <sys/types.h>

#include <limits>
#include <string>

#include <httplib.h>

#include "server/generation/completion.h"

namespace flashserve {

// True when the peer has closed (or reset) the connection. Never blocks.
bool socket_closed(int fd);

// A handler's client: gone when its socket is closed; writes go to httplib's sink (streaming).
class SocketConnection : public ClientConnection {
 public:
  SocketConnection(int fd, httplib::DataSink* sink) : fd_(fd), sink_(sink) {}
  bool gone() override { return socket_closed(fd_); }
  bool write(const std::string& data) override {
    return sink_ && !socket_closed(fd_) && sink_->write(data.data(), data.size());
  }

 private:
  int fd_;
  httplib::DataSink* sink_;
};

// One complete request (from ConnectionFront) as an httplib::Stream: reads come from the
// buffered request, writes go to the socket (non-blocking, bounded wait). It also notes whether
// the response head said "Connection: close" (a handler's choice, e.g. after a 401), so that
// the connection is not kept for another request.
class BufferedRequestStream : public httplib::Stream {
 public:
  BufferedRequestStream(int fd, const std::string& request, int write_timeout_ms)
      : fd_(fd), in_(request), write_timeout_ms_(write_timeout_ms) {}

  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  // httplib (built without CPPHTTPLIB_USE_POLL) answers 500 for a socket >= FD_SETSIZE, where
  // its select() could not wait on it; it needs the value for nothing else here (reads and
  // writes go through this class), so a high descriptor is not passed on.
  socket_t socket() const override { return fd_ < FD_SETSIZE ? fd_ : 0; }

  bool response_closes() const { return closes_; }

 private:
  int fd_;
  const std::string& in_;
  size_t pos_ = 0;
  int write_timeout_ms_;
  std::string head_;
  bool head_done_ = false;
  bool closes_ = false;
};

// httplib::Server for its parser, router and response writer only: ConnectionFront owns the
// sockets and calls serve() with one complete request at a time (process_request is protected).
class RoutedServer : public httplib::Server {
 public:
  // httplib ends a chunked (SSE) response early when it thinks it is shutting down, which it
  // reads from its own listening socket (svr_sock_), unused here: a placeholder value means
  // "running", INVALID_SOCKET (after stop) ends the streams still open.
  RoutedServer() { svr_sock_ = std::numeric_limits<socket_t>::max(); }
  void stop_streams() { svr_sock_ = INVALID_SOCKET; }
  bool serve(httplib::Stream& stream, bool close_after, bool& client_asked_close) {
    return process_request(stream, close_after, client_asked_close, {});
  }
};

}  // namespace flashserve
