// SSE parsing and the cpp-httplib calls of flashserve-chat. A streaming request runs on a worker
// thread so that the caller's thread can close the socket (httplib's Client::stop) on Ctrl-C even
// while no bytes arrive.
#include "chat_cli/http_stream.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <httplib.h>

namespace flashserve::chat {

using json = nlohmann::json;

// ---- SSE ------------------------------------------------------------------------------------

void SseParser::end_line(std::vector<std::string>* out) {
  if (line_.empty()) {  // a blank line ends the event
    if (has_data_) out->push_back(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line_[0] != ':') {  // ':' starts a comment
    size_t colon = line_.find(':');
    std::string field = line_.substr(0, colon);
    std::string value = colon == std::string::npos ? "" : line_.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.erase(0, 1);
    if (field == "data") {
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
  }
  line_.clear();
}

std::vector<std::string> SseParser::feed(const std::string& bytes) {
  std::vector<std::string> out;
  for (char c : bytes) {
    if (c == '\n' && last_was_cr_) {  // the LF of a CRLF: the line already ended at the CR
      last_was_cr_ = false;
      continue;
    }
    last_was_cr_ = c == '\r';
    if (c == '\n' || c == '\r') {
      end_line(&out);
    } else {
      line_ += c;
    }
  }
  return out;
}

std::optional<BaseUrl> parse_base_url(const std::string& url) {
  size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos) return std::nullopt;
  std::string scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") return std::nullopt;
  size_t host_begin = scheme_end + 3;
  size_t slash = url.find('/', host_begin);
  std::string host_port = url.substr(host_begin, slash == std::string::npos ? std::string::npos
                                                                              : slash - host_begin);
  if (host_port.empty() || host_port[0] == ':') return std::nullopt;
  size_t colon = host_port.rfind(':');
  if (colon != std::string::npos && host_port.find(']') == std::string::npos) {
    std::string port = host_port.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
      return std::nullopt;
    }
  }
  BaseUrl b;
  b.scheme_host_port = scheme + "://" + host_port;
  if (slash != std::string::npos) {
    b.path_prefix = url.substr(slash);
    while (!b.path_prefix.empty() && b.path_prefix.back() == '/') b.path_prefix.pop_back();
  }
  return b;
}

void parse_error_body(const std::string& body, int status, std::string* message,
                      std::string* code) {
  json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const json& e = j["error"];
    if (e.contains("message") && e["message"].is_string()) *message = e["message"];
    if (e.contains("code") && e["code"].is_string()) *code = e["code"];
  }
  if (message->empty()) {
    *message = "HTTP " + std::to_string(status) + (body.empty() ? "" : ": " + body.substr(0, 200));
  }
}

// ---- ApiClient ------------------------------------------------------------------------------

namespace {

std::string transport_message(httplib::Error e, const std::string& where) {
  switch (e) {
    case httplib::Error::Connection:
    case httplib::Error::ConnectionTimeout:
      return "cannot connect to " + where;
    case httplib::Error::Read:
      return "the connection to " + where + " broke while reading the reply";
    case httplib::Error::Write:
      return "the connection to " + where + " broke while sending the request";
    default:
      return "request to " + where + " failed: " + httplib::to_string(e);
  }
}

void configure(httplib::Client& cli, const std::string& api_key) {
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(600, 0);  // a busy server may take long between tokens
  cli.set_write_timeout(30, 0);
  if (!api_key.empty()) cli.set_bearer_token_auth(api_key);
}

}  // namespace

ApiClient::ApiClient(BaseUrl base, std::string api_key)
    : base_(std::move(base)), api_key_(std::move(api_key)) {}

ModelsResult ApiClient::models() {
  ModelsResult r;
  httplib::Client cli(base_.scheme_host_port);
  configure(cli, api_key_);
  cli.set_read_timeout(30, 0);
  auto res = cli.Get(base_.path_prefix + "/v1/models");
  if (!res) {
    r.outcome = Outcome::kUnreachable;
    r.message = transport_message(res.error(), base_.scheme_host_port);
    return r;
  }
  r.status = res->status;
  if (res->status < 200 || res->status >= 300) {
    std::string code;
    r.outcome = Outcome::kHttpError;
    parse_error_body(res->body, res->status, &r.message, &code);
    return r;
  }
  json j = json::parse(res->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty()) {
    const json& m = j["data"][0];
    if (m.contains("id") && m["id"].is_string()) r.model_id = m["id"];
    if (m.contains("max_model_len") && m["max_model_len"].is_number_integer()) {
      r.max_model_len = m["max_model_len"];
    }
    if (m.contains("chat_template") && m["chat_template"].is_boolean()) {
      r.chat_template = m["chat_template"].get<bool>();
    }
  }
  return r;
}

StreamResult ApiClient::stream_completion(json request,
                                          const std::function<void(const std::string&)>& on_text,
                                          const std::atomic<bool>* cancel, Endpoint endpoint) {
  request["stream"] = true;
  StreamResult r;
  httplib::Client cli(base_.scheme_host_port);
  configure(cli, api_key_);

  SseParser parser;
  std::string error_body;
  bool got_done = false;
  auto on_payload = [&](const std::string& data) {
    if (data == "[DONE]") {
      got_done = true;
      return;
    }
    json j = json::parse(data, nullptr, false);
    if (!j.is_object()) return;
    if (j.contains("error")) {
      r.outcome = Outcome::kStreamError;
      parse_error_body(data, r.status, &r.message, &r.error_code);
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      r.prompt_tokens = j["usage"].value("prompt_tokens", -1);
      r.completion_tokens = j["usage"].value("completion_tokens", -1);
    }
    if (!j.contains("choices") || !j["choices"].is_array()) return;
    for (const json& c : j["choices"]) {
      if (c.value("index", 0) != 0) continue;
      // Completions carry "text"; chat chunks carry {"delta": {"content"}}.
      const json* text = c.contains("text") ? &c["text"] : nullptr;
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content")) {
        text = &c["delta"]["content"];
      }
      if (text && text->is_string()) {
        const std::string& t = text->get_ref<const std::string&>();
        if (!t.empty()) on_text(t);
      }
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
        r.finish_reason = c["finish_reason"];
      }
    }
  };

  httplib::Request req;
  req.method = "POST";
  req.path = base_.path_prefix +
             (endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions");
  req.body = request.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.response_handler = [&](const httplib::Response& res) {
    r.status = res.status;
    return !(cancel && cancel->load());
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (cancel && cancel->load()) return false;
    if (r.status < 200 || r.status >= 300) {
      error_body.append(data, n);
      return true;
    }
    for (const auto& payload : parser.feed(std::string(data, n))) on_payload(payload);
    return !(cancel && cancel->load());
  };

  // The request runs on a worker; this thread watches `cancel` and closes the socket.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  httplib::Error error = httplib::Error::Success;
  std::thread worker([&] {
    httplib::Response res;
    httplib::Error e = httplib::Error::Success;
    cli.send(req, res, e);
    std::lock_guard<std::mutex> lock(mu);
    error = e;
    finished = true;
    cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    while (!finished) {
      cv.wait_for(lock, std::chrono::milliseconds(20));
      if (!finished && cancel && cancel->load()) {
        // Shuts the socket down: the server sees the disconnect and cancels. Repeated on every
        // tick in case the worker was still connecting the first time.
        lock.unlock();
        cli.stop();
        lock.lock();
      }
    }
  }
  worker.join();

  if (cancel && cancel->load()) {
    r.outcome = Outcome::kCancelled;
    return r;
  }
  if (r.status == 0) {
    r.outcome = Outcome::kUnreachable;
    r.message = transport_message(error, base_.scheme_host_port);
    return r;
  }
  if (r.status < 200 || r.status >= 300) {
    r.outcome = Outcome::kHttpError;
    parse_error_body(error_body, r.status, &r.message, &r.error_code);
    return r;
  }
  if (r.outcome == Outcome::kStreamError) return r;
  if (error != httplib::Error::Success || (!got_done && r.finish_reason.empty())) {
    r.outcome = Outcome::kStreamError;
    r.message = error != httplib::Error::Success
                    ? transport_message(error, base_.scheme_host_port)
                    : "the stream ended before the reply was complete";
  }
  return r;
}

}  // namespace flashserve::chat
