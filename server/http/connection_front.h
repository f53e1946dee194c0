// ConnectionFront: the server's socket layer. One acceptor thread owns the listening socket and
// every connection that is between requests: it reads request heads and bodies with poll()
// under deadlines, caps connections per client address and in total, answers malformed or
// over-limit requests itself (400/408/411/413/431/503, then closes), and hands each complete
// request to a worker. Workers only ever see complete requests, so a slow or silent client
// costs a file descriptor and a few bytes, never a thread. GET /health and /metrics go to a
// reserved worker pool that a full request pool cannot block. Pipelined requests on one
// connection are served one after the other, in order. (docs/SERVER.md, "Connections")
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/http/request_reader.h"

namespace flashserve {

struct ConnectionLimits {
  int max_connections = 4096;            // open connections in all; beyond: 503 and close
  int max_connections_per_client = 256;  // open connections from one client address; 0 = no cap
  int head_timeout_ms = 3000;     // from a request's first byte to the end of its head
  int body_timeout_ms = 30000;    // from the end of the head to the end of the body
  int idle_timeout_ms = 5000;     // a connection with no request started (new or kept alive)
  int write_timeout_ms = 5000;    // a response write that makes no progress
  int max_requests_per_connection = 1000;
  RequestLimits request;
};

struct ConnectionFrontOptions {
  std::string host = "127.0.0.1";
  int port = 8000;   // 0: any free port
  int workers = 64;  // threads for ordinary requests; when all are busy: 503
  int reserved_workers = 2;
  std::vector<std::string> reserved_paths = {"/health", "/metrics"};  // GET only
  ConnectionLimits limits;
};

// Serves one complete, normalised request (see read_request) on socket `fd` and writes the
// response; `last`: the response must close the connection. Returns true when the connection
// may carry another request.
using ServeRequest = std::function<bool(int fd, const std::string& request, bool last)>;
// The body (JSON) of an error the front answers itself; also where such answers are counted.
using ErrorBody = std::function<std::string(int status, const std::string& message)>;

class ConnectionFront {
 public:
  ConnectionFront(ConnectionFrontOptions options, ServeRequest serve, ErrorBody error_body);
  ~ConnectionFront();
  // Binds, listens and starts the worker threads; false (with a message on stderr) when it cannot.
  bool bind();
  int port() const;
  // Serves until stop(); returns when every connection is closed and every worker is done.
  void run();
  // Thread-safe: no new connections; connections between requests close at once, busy ones
  // after their current response.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes all of `data` to the non-blocking socket `fd`, waiting up to `timeout_ms` each time it
// cannot make progress. False on error or timeout.
bool write_all(int fd, const char* data, size_t size, int timeout_ms);

// "HTTP/1.1 <status> <reason>" and the headers of a JSON response that closes the connection.
std::string error_response(int status, const std::string& json_body,
                           const std::vector<std::string>& extra_headers = {});

}  // namespace flashserve
