// HttpServer over cpp-httplib (the only file that includes httplib.h). Handler threads parse and
// validate a request (openai_api), run it through a Completion against the Engine, and watch the
// client's socket while they wait so that a disconnect cancels the engine request at once.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <httplib.h>

#include "server/completion.h"
#include "server/constant_time.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

// httplib (0.11) does not tell a handler its socket, and has no "is the client still there"
// query. The connection's 4-tuple is unique while the handler runs (httplib closes the socket
// only after the handler returns), so we find our fd by matching the peer address and the local
// port among this process's sockets. Done once per completion request.
int find_socket_fd(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0) continue;
    // Sockets only, told by the link name rather than fstat(fd): the scan must not touch fds that
    // other threads own and may be closing (ThreadSanitizer flagged fstat vs closedir). The
    // getpeername below only runs on sockets; one closed and reused meanwhile cannot carry our
    // 4-tuple, which stays unique while our connection is open.
    char link[64] = {0};
    const std::string entry = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(entry.c_str(), link, sizeof link - 1) <= 0 || std::strncmp(link, "socket:", 7) != 0) {
      continue;
    }
    sockaddr_storage peer{}, local{};
    socklen_t plen = sizeof peer, llen = sizeof local;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    char ip[INET6_ADDRSTRLEN] = {0};
    int pport = -1, lport = -1;
    if (peer.ss_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(&peer);
      inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
      pport = ntohs(a->sin_port);
      lport = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&peer);
      inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
      pport = ntohs(a->sin6_port);
      lport = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    } else {
      continue;
    }
    if (pport == req.remote_port && lport == req.local_port && req.remote_addr == ip) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

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

}  // namespace

constexpr int kListenBacklog = 4096;  // pending connections the kernel may queue

struct HttpServer::Impl {
  Engine& engine;
  const Tokenizer& tokenizer;
  ServedModel model;
  HttpServerOptions options;
  ServerMetrics metrics;
  httplib::Server svr;
  std::atomic<bool> draining{false};
  int port = -1;
  socket_t listen_sock = -1;  // the listening socket, once bound
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
                 "ttft_ms=%.1f tokens_per_s=%.1f total_ms=%.1f\n",
                 c.id().c_str(), status, stream ? 1 : 0, c.prompt_tokens(), c.completion_tokens(),
                 ttft < 0 ? 0.0 : ttft * 1e3, tps, seconds * 1e3);
  }

  void handle_completion(const httplib::Request& req, httplib::Response& res,
                         ResponseFormat format) {
    if (draining.load()) {
      ApiError e;
      e.status = 503;
      e.type = "server_error";
      e.code = "shutting_down";
      e.message = "The server is shutting down";
      e.retry_after_s = 1;
      return send_error(res, e);
    }
    auto parsed = format == ResponseFormat::kChat
                      ? parse_chat_request(req.body, model, tokenizer)
                      : parse_completion_request(req.body, model, tokenizer);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto& request = std::get<CompletionRequest>(parsed);
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

  void setup() {
    int threads = options.threads;
    if (threads <= 0) threads = 64;
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_payload_max_length(options.max_body_bytes);
    // httplib's default also sets SO_REUSEPORT, which lets a second server (or any process of the
    // same user) bind our port and silently take part of the traffic. SO_REUSEADDR alone still
    // allows a quick restart over TIME_WAIT connections. (tests/fault: BadFlagsAndTakenPort)
    svr.set_socket_options([this](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_sock = sock;  // the last one offered is the one that bound (see bind())
    });
    svr.set_keep_alive_max_count(1000);

    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options.api_key.empty() || req.path == "/health") {
        return httplib::Server::HandlerResponse::Unhandled;
      }
      const std::string h = req.get_header_value("Authorization");
      const std::string kBearer = "Bearer ";
      bool ok = h.compare(0, kBearer.size(), kBearer) == 0 &&
                constant_time_equal(h.substr(kBearer.size()), options.api_key);
      if (ok) return httplib::Server::HandlerResponse::Unhandled;
      ApiError e;
      e.status = 401;
      e.code = "invalid_api_key";
      e.message = h.empty() ? "Missing API key: send 'Authorization: Bearer <key>'"
                            : "Incorrect API key provided";
      send_error(res, e);
      res.set_header("Connection", "close");  // the unread body must not be parsed as a request
      return httplib::Server::HandlerResponse::Handled;
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

    svr.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_completion(req, res, ResponseFormat::kCompletion);
    });
    svr.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_completion(req, res, ResponseFormat::kChat);
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(models_json(model)), "application/json");
    });
    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      bool ok = !draining.load() && !engine.failed();
      res.status = ok ? 200 : 503;
      res.set_content(ok ? "{\"status\":\"ok\"}" : "{\"status\":\"unavailable\"}",
                      "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(engine.metrics()), "text/plain; version=0.0.4");
    });
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer& tokenizer, ServedModel model,
                       HttpServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(model), std::move(options))) {
  impl_->setup();
}

HttpServer::~HttpServer() = default;

bool HttpServer::bind() {
  if (impl_->options.port == 0) {
    impl_->port = impl_->svr.bind_to_any_port(impl_->options.host);
  } else if (impl_->svr.bind_to_port(impl_->options.host, impl_->options.port)) {
    impl_->port = impl_->options.port;
  }
  if (impl_->port <= 0) {
    std::fprintf(stderr, "[flashserve] cannot listen on %s:%d\n", impl_->options.host.c_str(),
                 impl_->options.port);
    return false;
  }
  // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed inside Debian's
  // compiled library): a burst of more simultaneous connects overflows the queue and those
  // clients wait for SYN retries (1 s, 3 s, 7 s: seen as a TTFT p99 of 9 s at 256 concurrent
  // clients on the GPU). Listening again on the bound socket raises it (capped by somaxconn).
  if (impl_->listen_sock >= 0) ::listen(impl_->listen_sock, kListenBacklog);
  return true;
}

int HttpServer::port() const { return impl_->port; }
void HttpServer::run() { impl_->svr.listen_after_bind(); }
void HttpServer::stop() {
  impl_->draining = true;
  impl_->svr.stop();
}
void HttpServer::set_draining() { impl_->draining = true; }

}  // namespace flashserve
