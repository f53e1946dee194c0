// The chat client's HTTP side: an incremental Server-Sent-Events parser (pure, unit-tested), the
// base-URL parser, and ApiClient, which calls GET /v1/models and streams POST
// /v1/chat/completions (or /v1/completions, for the local templates) over cpp-httplib, cancellable from another thread (Ctrl-C) by closing the connection.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace flashserve::chat {

// Feeds bytes as they arrive; returns the `data` payloads of the events completed by them
// (lines "data: X" of one event are joined with '\n'; comments and other fields are ignored;
// LF, CRLF or CR line ends).
class SseParser {
 public:
  std::vector<std::string> feed(const std::string& bytes);

 private:
  void end_line(std::vector<std::string>* out);
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool last_was_cr_ = false;
};

struct BaseUrl {
  std::string scheme_host_port;  // "http://127.0.0.1:8000" (what httplib::Client takes)
  std::string path_prefix;       // "" or "/prefix" (no trailing slash)
};
// "http://host[:port][/prefix]" or "https://..."; nullopt if malformed.
std::optional<BaseUrl> parse_base_url(const std::string& url);

enum class Outcome {
  kOk,           // the reply finished (finish_reason set, or [DONE])
  kCancelled,    // stopped by the caller (Ctrl-C)
  kUnreachable,  // could not connect, or the connection broke before a response
  kHttpError,    // a non-2xx status (see status, error_code, message)
  kStreamError,  // an error event inside the stream, or a stream that ended abruptly
};

struct StreamResult {
  Outcome outcome = Outcome::kOk;
  int status = 0;
  std::string message;     // the error's message (server's, or the transport's)
  std::string error_code;  // the error envelope's "code", e.g. context_length_exceeded
  std::string finish_reason;
  int prompt_tokens = -1;  // from the usage chunk
  int completion_tokens = -1;
};

struct ModelsResult {
  Outcome outcome = Outcome::kOk;
  int status = 0;
  std::string message;
  std::string model_id;
  int max_model_len = 0;
  std::optional<bool> chat_template;  // /v1/models "chat_template"; absent on other servers
};

enum class Endpoint { kCompletions, kChat };

class ApiClient {
 public:
  ApiClient(BaseUrl base, std::string api_key);

  ModelsResult models();
  // Streams a completion (`request` gets "stream": true) from /v1/completions or
  // /v1/chat/completions; `on_text` receives each text delta of choice 0. When *cancel becomes
  // true the connection is closed, which makes the server cancel the request; returns kCancelled.
  StreamResult stream_completion(nlohmann::json request,
                                 const std::function<void(const std::string&)>& on_text,
                                 const std::atomic<bool>* cancel,
                                 Endpoint endpoint = Endpoint::kCompletions);

 private:
  BaseUrl base_;
  std::string api_key_;
};

// Fills status/message/error_code of a non-2xx response from its body (the OpenAI error
// envelope when it is one).
void parse_error_body(const std::string& body, int status, std::string* message,
                      std::string* code);

}  // namespace flashserve::chat
