// HttpServer: the HTTP front end (routes, API key, body limit, error envelopes, SSE, client
// disconnect detection): ConnectionFront owns the sockets and reads whole requests; cpp-httplib
// parses, routes and writes the responses. The pimpl keeps httplib.h out of this header.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/http/connection_front.h"
#include "server/http/cors.h"
#include "server/api/openai_api.h"

namespace flashserve {

class Tokenizer;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;               // 0: any free port (see HttpServer::port())
  std::string api_key;           // "" = no authentication
  bool metrics_public = false;   // /metrics needs no API key (as /health)
  bool force_include_usage = false;  // every stream ends with usage (stream_options aside)
  CorsPolicy cors;               // browser origins allowed to call the API (default none)
  size_t max_body_bytes = 4u << 20;
  int threads = 0;               // handler threads; 0 = 64
  bool log_requests = true;
  ConnectionLimits limits;       // deadlines and connection caps (request.max_body_bytes: ignored,
                                 // max_body_bytes above is the one used)
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const Tokenizer& tokenizer, ServedModel model,
             HttpServerOptions options);
  ~HttpServer();
  // Binds the listening socket; false (with a message on stderr) when it cannot.
  bool bind();
  int port() const;
  // Serves until stop(); returns when the listener is closed and the handlers are done.
  void run();
  // Thread-safe. New requests get 503 from now on; the listener is closed.
  void stop();
  // New completions get 503 (and /health 503) while in-flight ones finish.
  void set_draining();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashserve
