// HttpServer: ConnectionFront (server/connection_front.h) reads each request whole under
// deadlines and hands it to a worker thread, which runs it through cpp-httplib's parser, router
// and response writer (the only file that includes httplib.h). Handlers validate a request
// (openai_api), run it through a Completion against the Engine, and watch the client's socket
// while they wait so that a disconnect cancels the engine request at once.
#include "server/http_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

#include <httplib.h>

#include "server/completion.h"
#include "server/connection_front.h"
#include "server/constant_time.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

// The socket of the request this thread serves (ConnectionFront hands one complete request at a
// time to a worker thread, and the handler, its content provider included, runs on that thread).
thread_local int t_client_fd = -1;

// Kept as a function of the request so that handlers read as before; the request is served on
// this thread, so its socket is the thread's.
int find_socket_fd(const httplib::Request&) { return t_client_fd; }

// True when the peer has closed (or reset) the connection. Never blocks.
bool socket_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;
  return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

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
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return poll(&p, 1, write_timeout_ms_) > 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
  }
  ssize_t read(char* ptr, size_t size) override {
    size = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, size);
    pos_ += size;
    return static_cast<ssize_t>(size);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!head_done_) {
      head_.append(ptr, std::min<size_t>(size, 16384));
      const size_t end = head_.find("\r\n\r\n");
      if (end != std::string::npos || head_.size() >= 16384) {
        head_done_ = true;
        std::string h = head_.substr(0, end) + "\r\n";
        for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        closes_ = h.find("\r\nconnection: close\r\n") != std::string::npos;
      }
    }
    return write_all(fd_, ptr, size, write_timeout_ms_) ? static_cast<ssize_t>(size) : -1;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address(getpeername, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address(getsockname, ip, port);
  }
  // httplib (built without CPPHTTPLIB_USE_POLL) answers 500 for a socket >= FD_SETSIZE, where
  // its select() could not wait on it; it needs the value for nothing else here (reads and
  // writes go through this class), so a high descriptor is not passed on.
  socket_t socket() const override { return fd_ < FD_SETSIZE ? fd_ : 0; }

  bool response_closes() const { return closes_; }

 private:
  using NameFn = int (*)(int, sockaddr*, socklen_t*);
  void address(NameFn fn, std::string& ip, int& port) const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    char host[NI_MAXHOST] = {0}, serv[NI_MAXSERV] = {0};
    if (fn(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
        getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
      return;
    }
    ip = host;
    port = std::atoi(serv);
  }

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

}  // namespace

struct HttpServer::Impl {
  using Handler = void (Impl::*)(const httplib::Request&, httplib::Response&);
  struct Route {
    const char* method;  // "GET" or "POST"
    const char* path;
    Handler handler;
  };
  // Every route, once: registered with httplib, and the source of 405 + Allow for a known path
  // asked with another method. A new endpoint is one line here.
  static const std::vector<Route>& routes() {
    static const std::vector<Route> table = {
        {"POST", "/v1/completions", &Impl::handle_text_completion},
        {"POST", "/v1/chat/completions", &Impl::handle_chat_completion},
        {"GET", "/v1/models", &Impl::handle_models},
        {"GET", "/health", &Impl::handle_health},
        {"GET", "/metrics", &Impl::handle_metrics},
    };
    return table;
  }

  Engine& engine;
  const Tokenizer& tokenizer;
  ServedModel model;
  HttpServerOptions options;
  ServerMetrics metrics;
  RoutedServer svr;
  std::unique_ptr<ConnectionFront> front;
  std::atomic<bool> draining{false};
  std::mutex log_mu;

  Impl(Engine& e, const Tokenizer& t, ServedModel m, HttpServerOptions o)
      : engine(e), tokenizer(t), model(std::move(m)), options(std::move(o)) {}

  void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
    res.set_content(dump_json(error_json(e)), "application/json");
  }

  void log_request(const Completion& c, int status, bool stream, double seconds) {
    if (!options.log_requests) return;
    double ttft = c.ttft_s();
    double tps = seconds > 0 ? c.completion_tokens() / seconds : 0;
    std::lock_guard<std::mutex> lock(log_mu);
    std::fprintf(stderr,
                 "[flashserve] %s status=%d stream=%d prompt_tokens=%d completion_tokens=%d "
                 "ttft_ms=%.1f tokens_per_s=%.1f total_ms=%.1f cached_tokens=%d\n",
                 c.id().c_str(), status, stream ? 1 : 0, c.prompt_tokens(), c.completion_tokens(),
                 ttft < 0 ? 0.0 : ttft * 1e3, tps, seconds * 1e3, c.cached_tokens());
  }

  void handle_text_completion(const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, ResponseFormat::kCompletion);
  }
  void handle_chat_completion(const httplib::Request& req, httplib::Response& res) {
    handle_completion(req, res, ResponseFormat::kChat);
  }

  // Both endpoints run the same pipeline; `format` decides only the JSON and SSE shapes.
  void handle_completion(const httplib::Request& req, httplib::Response& res,
                         ResponseFormat format) {
    if (draining.load()) {
      return send_error(res, server_error(503, "shutting_down", "The server is shutting down"));
    }
    auto parsed = format == ResponseFormat::kChat
                      ? parse_chat_request(req.body, model, tokenizer)
                      : parse_completion_request(req.body, model, tokenizer);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto& request = std::get<CompletionRequest>(parsed);
    // Authentication passed, so the key presented is options.api_key.
    request.cache_salt = tenant_cache_salt(options.api_key, request.cache_salt);
    const int64_t kv_tokens =
        int64_t(engine.runner().num_kv_blocks()) * engine.runner().block_size();
    for (const auto& p : request.prompts) {
      if (int64_t(p.size()) + request.max_tokens > kv_tokens) {
        return send_error(res, bad_request(
            "prompt + max_tokens (" + std::to_string(p.size() + request.max_tokens) +
                ") exceeds the KV cache capacity of " + std::to_string(kv_tokens) + " tokens",
            "max_tokens", "context_length_exceeded"));
      }
    }
    const bool stream = request.stream;
    CompletionContext ctx{&engine, &tokenizer, &model, &metrics};
    auto completion = std::make_shared<Completion>(ctx, std::move(request));
    if (auto e = completion->start()) return send_error(res, *e);
    const int fd = find_socket_fd(req);
    const auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [t0] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    if (!stream) {
      SocketConnection conn(fd, nullptr);
      CompletionResult r = completion->run(conn);
      log_request(*completion, r.client_gone ? 499 : r.status, false, elapsed());
      if (r.client_gone) {
        res.status = 499;  // nobody reads it; httplib's write fails and the socket is closed
        res.set_header("Connection", "close");
        return;
      }
      res.status = r.status;
      if (r.retry_after_s > 0) res.set_header("Retry-After", std::to_string(r.retry_after_s));
      res.set_content(dump_json(r.body), "application/json");
      return;
    }
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, completion, fd, elapsed](size_t, httplib::DataSink& sink) {
          SocketConnection conn(fd, &sink);
          bool ok = completion->stream(conn);
          log_request(*completion, ok ? 200 : 499, true, elapsed());
          if (!ok) return false;
          sink.done();
          return true;
        });
  }

  void handle_models(const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json(models_json(model)), "application/json");
  }
  void handle_health(const httplib::Request&, httplib::Response& res) {
    bool ok = !draining.load() && !engine.failed();
    res.status = ok ? 200 : 503;
    res.set_content(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}", "application/json");
  }
  void handle_metrics(const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(engine.metrics()), "text/plain; version=0.0.4");
  }

  // The whole Authorization value must be "Bearer <key>": the key is compared over its full
  // length in constant time (ConnectionFront has already refused control characters, NUL
  // included). The scheme is matched as OpenAI's clients send it; a second Authorization
  // header is refused rather than guessed at.
  bool authorized(const httplib::Request& req) const {
    if (req.get_header_value_count("Authorization") != 1) return false;
    const std::string h = req.get_header_value("Authorization");
    constexpr std::string_view kScheme = "Bearer ";
    return h.compare(0, kScheme.size(), kScheme) == 0 &&
           constant_time_equal(std::string_view(h).substr(kScheme.size()), options.api_key);
  }

  // "GET, HEAD" style list of the methods a known path takes; "" for an unknown path.
  static std::string allowed_methods(const std::string& path) {
    std::string allow;
    for (const Route& r : routes()) {
      if (path != r.path) continue;
      if (!allow.empty()) allow += ", ";
      allow += r.method;
      if (std::string_view(r.method) == "GET") allow += ", HEAD";
    }
    return allow;
  }

  // The error envelope for what ConnectionFront answers itself (the request never reaches a
  // handler); counted like any other response.
  std::string front_error_body(int status, const std::string& message) {
    ApiError e;
    e.status = status;
    e.message = message;
    switch (status) {
      case 408: e.code = "request_timeout"; break;
      case 411: e.code = "length_required"; break;
      case 413: e.code = "payload_too_large"; break;
      case 431: e.code = "headers_too_large"; break;
      case 503: e.type = "server_error"; e.code = "server_overloaded"; break;
      default: break;
    }
    metrics.count_request(status);
    return dump_json(error_json(e));
  }

  bool serve(int fd, const std::string& request, bool last) {
    BufferedRequestStream stream(fd, request, options.limits.write_timeout_ms);
    t_client_fd = fd;
    bool client_asked_close = false;
    const bool ok = svr.serve(stream, last, client_asked_close);
    t_client_fd = -1;
    return ok && !client_asked_close && !stream.response_closes();
  }

  void setup() {
    svr.set_payload_max_length(options.max_body_bytes);
    // Only what the Keep-Alive response header says; ConnectionFront enforces both.
    svr.set_keep_alive_timeout((options.limits.idle_timeout_ms + 999) / 1000);
    svr.set_keep_alive_max_count(size_t(options.limits.max_requests_per_connection));

    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!options.api_key.empty() && req.path != "/health" && !authorized(req)) {
        ApiError e;
        e.status = 401;
        e.code = "invalid_api_key";
        e.message = req.has_header("Authorization")
                        ? "Incorrect API key provided"
                        : "Missing API key: send 'Authorization: Bearer <key>'";
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
      const std::string allow = allowed_methods(req.path);
      if (!allow.empty() && (", " + allow + ",").find(", " + req.method + ",") == std::string::npos) {
        ApiError e;
        e.status = 405;
        e.code = "method_not_allowed";
        e.message = "Method " + req.method + " is not allowed on " + req.path + " (allowed: " +
                    allow + ")";
        send_error(res, e);
        res.set_header("Allow", allow);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });

    // Fills the envelope for errors httplib produces itself (404 route, 413 body, 400 syntax).
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty() || res.status == 499) return httplib::Server::HandlerResponse::Unhandled;
      ApiError e;
      e.status = res.status;
      if (res.status == 404) {
        e.code = "not_found";
        e.message = "Unknown route: " + req.method + " " + req.path;
      } else if (res.status == 413) {
        e.code = "payload_too_large";
        e.message = "Request body exceeds the limit of " + std::to_string(options.max_body_bytes) +
                    " bytes";
      } else if (res.status >= 500) {
        e.type = "server_error";
        e.message = "Internal server error";
      } else {
        e.message = "Bad request";
      }
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }));

    svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res,
                                     std::exception_ptr ep) {
      std::string what = "unknown exception";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& ex) {
        what = ex.what();
      } catch (...) {
      }
      std::fprintf(stderr, "[flashserve] handler exception: %s\n", what.c_str());
      ApiError e;
      e.status = 500;
      e.type = "server_error";
      e.message = "Internal server error";
      send_error(res, e);
    });

    svr.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
      metrics.count_request(res.status);
    });

    for (const Route& r : routes()) {
      auto handler = [this, h = r.handler](const httplib::Request& req, httplib::Response& res) {
        (this->*h)(req, res);
      };
      if (std::string_view(r.method) == "POST") {
        svr.Post(r.path, handler);
      } else {
        svr.Get(r.path, handler);
      }
    }

    ConnectionFrontOptions fo;
    fo.host = options.host;
    fo.port = options.port;
    fo.workers = options.threads > 0 ? options.threads : 64;
    fo.limits = options.limits;
    fo.limits.request.max_body_bytes = options.max_body_bytes;
    front = std::make_unique<ConnectionFront>(
        fo, [this](int fd, const std::string& request, bool last) { return serve(fd, request, last); },
        [this](int status, const std::string& message) { return front_error_body(status, message); });
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, ServedModel model,
                       HttpServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(model), std::move(options))) {
  impl_->setup();
}

HttpServer::~HttpServer() = default;

bool HttpServer::bind() { return impl_->front->bind(); }
int HttpServer::port() const { return impl_->front->port(); }
void HttpServer::run() { impl_->front->run(); }
void HttpServer::stop() {
  impl_->draining = true;
  impl_->svr.stop_streams();
  impl_->front->stop();
}
void HttpServer::set_draining() { impl_->draining = true; }

}  // namespace flashserve
