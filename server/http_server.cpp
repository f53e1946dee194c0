// HttpServer: ConnectionFront (server/http/connection_front.h) reads each request whole under
// deadlines and hands it to a worker thread, which runs it through cpp-httplib's parser, router
// and response writer (server/httplib_bridge.h). Handlers validate a request (openai_api), run
// it through a Completion against the Engine, and watch the client's socket while they wait so
// that a disconnect cancels the engine request at once.
#include "server/http_server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "server/endpoints/chat_request.h"
#include "server/endpoints/completions_request.h"
#include "server/endpoints/embeddings.h"
#include "server/endpoints/responses_output.h"
#include "server/endpoints/responses_store.h"
#include "server/endpoints/responses_stream.h"
#include "server/endpoints/tokenize.h"
#include "server/generation/completion.h"
#include "server/http/connection_front.h"
#include "server/http/constant_time.h"
#include "server/httplib_bridge.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

// The socket of the request this thread serves (ConnectionFront hands one complete request at a
// time to a worker thread, and the handler, its content provider included, runs on that thread).
thread_local int t_client_fd = -1;

}  // namespace

struct HttpServer::Impl {
  using Handler = void (Impl::*)(const httplib::Request&, httplib::Response&);
  struct Route {
    const char* method;  // "GET", "POST" or "DELETE"
    const char* path;
    Handler handler;
  };
  // Every route, once: registered with httplib, and the source of 405 + Allow for a known path
  // asked with another method (a pattern path, "(...)", matches as a regex and has no 405).
  // A new endpoint is one line here.
  static const std::vector<Route>& routes() {
    static const std::vector<Route> table = {
        {"POST", "/v1/completions", &Impl::handle_text_completion},
        {"POST", "/v1/chat/completions", &Impl::handle_chat_completion},
        {"POST", "/v1/responses", &Impl::handle_responses},
        {"POST", "/v1/embeddings", &Impl::handle_embeddings},
        {"GET", "/v1/responses/([^/]+)", &Impl::handle_response_get},
        {"DELETE", "/v1/responses/([^/]+)", &Impl::handle_response_delete},
        {"GET", "/v1/models", &Impl::handle_models},
        {"GET", "/v1/models/(.+)", &Impl::handle_model},
        {"POST", "/tokenize", &Impl::handle_tokenize},
        {"POST", "/detokenize", &Impl::handle_detokenize},
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
  ResponsesStore responses;  // /v1/responses with store (bounds: responses_store.h)
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

  static ApiError shutting_down() {
    return server_error(503, "shutting_down", "The server is shutting down");
  }

  // Both endpoints run the same pipeline; `format` decides only the JSON and SSE shapes.
  void handle_completion(const httplib::Request& req, httplib::Response& res,
                         ResponseFormat format) {
    if (draining.load()) return send_error(res, shutting_down());
    if (auto e = task_mismatch(model, req.path)) return send_error(res, *e);
    auto parsed = format == ResponseFormat::kChat
                      ? parse_chat_request(req.body, model, tokenizer)
                      : parse_completion_request(req.body, model, tokenizer);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    run_completion(res, std::move(std::get<CompletionRequest>(parsed)), nullptr);
  }

  // /v1/responses: a chat request underneath, its results reshaped (responses_output.h).
  void handle_responses(const httplib::Request& req, httplib::Response& res) {
    if (draining.load()) return send_error(res, shutting_down());
    if (auto e = task_mismatch(model, req.path)) return send_error(res, *e);
    auto parsed = parse_responses_request(req.body, model, tokenizer, responses);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto& r = std::get<ResponsesRequest>(parsed);
    run_completion(res, std::move(r.chat), std::make_shared<ResponsesTurn>(std::move(r.turn)));
  }
  void handle_response_get(const httplib::Request& req, httplib::Response& res) {
    std::optional<StoredResponse> r = responses.get(req.matches[1].str());
    if (!r) return send_error(res, response_not_found(req.matches[1].str()));
    res.set_content(dump_json(r->response), "application/json");
  }
  void handle_response_delete(const httplib::Request& req, httplib::Response& res) {
    if (!responses.erase(req.matches[1].str())) {
      return send_error(res, response_not_found(req.matches[1].str()));
    }
    res.set_content(dump_json(deleted_response_json(req.matches[1].str())), "application/json");
  }

  // Runs a validated request; `turn` (a /v1/responses request) reshapes what goes back, null
  // keeps the completions and chat shapes.
  void run_completion(httplib::Response& res, CompletionRequest request,
                      std::shared_ptr<const ResponsesTurn> turn) {
    // Authentication passed, so the key presented is options.api_key.
    request.cache_salt = tenant_cache_salt(options.api_key, request.cache_salt);
    if (options.force_include_usage && request.stream) request.include_usage = true;
    const bool stream = request.stream;
    CompletionContext ctx{&engine, &tokenizer, &model, &metrics};
    auto completion = std::make_shared<Completion>(ctx, std::move(request));
    if (auto e = completion->start()) return send_error(res, *e);
    const int fd = t_client_fd;
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
      if (turn && r.status == 200) {
        r.body = response_from_chat(*turn, r.body, tokenizer);
        keep_response(responses, *turn, r.body);
      }
      res.set_content(dump_json(r.body), "application/json");
      return;
    }
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, completion, fd, elapsed, turn](size_t, httplib::DataSink& sink) {
          SocketConnection conn(fd, &sink);
          bool ok = true;
          if (turn) {
            ResponsesEventWriter events(conn, *turn, tokenizer);
            ok = completion->stream(events);
            if (ok) keep_response(responses, *turn, events.response());
          } else {
            ok = completion->stream(conn);
          }
          log_request(*completion, ok ? 200 : 499, true, elapsed());
          if (!ok) return false;
          sink.done();
          return true;
        });
  }

  // /v1/embeddings: every input a prefill-only engine request (server/endpoints/embeddings.h).
  void handle_embeddings(const httplib::Request& req, httplib::Response& res) {
    if (draining.load()) return send_error(res, shutting_down());
    if (auto e = task_mismatch(model, req.path)) return send_error(res, *e);
    auto parsed = parse_embeddings_request(req.body, model, tokenizer);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    SocketConnection conn(t_client_fd, nullptr);
    CompletionContext ctx{&engine, &tokenizer, &model, &metrics};
    CompletionResult r = run_embeddings(ctx, std::get<EmbeddingsRequest>(parsed),
                                        tenant_cache_salt(options.api_key, ""), conn);
    res.status = r.status;
    if (r.client_gone) return res.set_header("Connection", "close");  // nobody reads it
    if (r.retry_after_s > 0) res.set_header("Retry-After", std::to_string(r.retry_after_s));
    res.set_content(dump_json(r.body), "application/json");
  }

  void handle_models(const httplib::Request&, httplib::Response& res) {
    res.set_content(dump_json(models_json(model)), "application/json");
  }
  void handle_model(const httplib::Request& req, httplib::Response& res) {
    send_json(res, model_response(req.matches[1].str(), model));
  }
  void handle_tokenize(const httplib::Request& req, httplib::Response& res) {
    send_json(res, tokenize_response(req.body, model, tokenizer));
  }
  void handle_detokenize(const httplib::Request& req, httplib::Response& res) {
    send_json(res, detokenize_response(req.body, model, tokenizer));
  }
  void send_json(httplib::Response& res, const JsonOrError& r) {
    if (auto* e = std::get_if<ApiError>(&r)) return send_error(res, *e);
    res.set_content(dump_json(std::get<json>(r)), "application/json");
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

  // A path this server answers (the target of a CORS preflight).
  static bool api_path(const std::string& path) {
    return !allowed_methods(path).empty() || path.rfind("/v1/models/", 0) == 0 ||
           path.rfind("/v1/responses/", 0) == 0;
  }

  // OpenAI routes this server does not implement: their 404 says so rather than "Unknown route".
  static bool unsupported_openai_path(const std::string& path) {
    for (std::string_view p : {"/v1/audio/", "/v1/images/",
                               "/v1/files", "/v1/batches", "/v1/moderations", "/v1/fine_tuning/",
                               "/v1/assistants", "/v1/threads", "/v1/vector_stores", "/v1/uploads",
                               "/v1/realtime"}) {
      if (path.rfind(p, 0) == 0 &&
          (p.back() == '/' || path.size() == p.size() || path[p.size()] == '/'))
        return true;
    }
    return false;
  }

  // A CORS preflight from an allowed origin: 204 with the Access-Control-* headers, before the
  // API key check (browsers send preflights without credentials).
  bool answer_preflight(const httplib::Request& req, httplib::Response& res) const {
    if (req.method != "OPTIONS" || !req.has_header("Access-Control-Request-Method") ||
        !api_path(req.path))
      return false;
    const HeaderList h = options.cors.preflight_headers(
        req.get_header_value("Origin"), req.get_header_value("Access-Control-Request-Headers"));
    if (h.empty()) return false;
    res.status = 204;
    for (const auto& [name, value] : h) res.set_header(name, value);
    return true;
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
      if (answer_preflight(req, res)) return httplib::Server::HandlerResponse::Handled;
      const bool open = req.path == "/health" || (req.path == "/metrics" && options.metrics_public);
      if (!options.api_key.empty() && !open && !authorized(req)) {
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
        e.message = unsupported_openai_path(req.path)
                        ? req.path + " is not supported by this server (docs/SERVER.md lists "
                                     "the endpoints it serves)"
                        : "Unknown route: " + req.method + " " + req.path;
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

    svr.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      metrics.count_request(res.status);
      if (res.has_header("Access-Control-Allow-Origin")) return;  // a preflight's own headers
      const HeaderList cors = options.cors.response_headers(req.get_header_value("Origin"));
      for (const auto& [name, value] : cors) res.set_header(name, value);
    });

    for (const Route& r : routes()) {
      auto handler = [this, h = r.handler](const httplib::Request& req, httplib::Response& res) {
        (this->*h)(req, res);
      };
      if (std::string_view(r.method) == "POST") {
        svr.Post(r.path, handler);
      } else if (std::string_view(r.method) == "DELETE") {
        svr.Delete(r.path, handler);
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
