// Completion: runs one validated /v1/completions or /v1/chat/completions request against the
// Engine (the same pipeline for both: the request's format only decides the JSON shapes), one
// engine request per choice (completion_choice.h builds each choice's text and logprobs), and
// writes the choices, usage and finish reasons as a JSON response or SSE events. Knows nothing
// about HTTP: the server hands it a ClientConnection to write to and to ask whether the client
// is still there.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/http/metrics.h"
#include "server/api/openai_api.h"

namespace flashserve {

class Tokenizer;
struct CompletionChoice;

class ClientConnection {
 public:
  virtual ~ClientConnection() = default;
  virtual bool gone() = 0;                           // the client disconnected
  virtual bool write(const std::string& data) = 0;   // streaming; false when the client is gone
  // One event of a chat/completions stream (a chunk, the usage chunk or an error envelope), and
  // its end. A connection that reshapes the stream (/v1/responses) overrides both.
  virtual bool send_event(const nlohmann::json& event) { return write(sse_event(event)); }
  virtual bool send_done() { return write(std::string(kSseDone)); }
};


struct CompletionResult {
  int status = 200;
  nlohmann::json body;       // the response, or an error envelope
  int retry_after_s = 0;
  bool client_gone = false;  // nothing can be sent
};

struct CompletionContext {
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ServedModel* model = nullptr;
  ServerMetrics* metrics = nullptr;
  std::chrono::milliseconds poll{50};  // how often a waiting handler checks the connection
};

class Completion {
 public:
  Completion(const CompletionContext& ctx, CompletionRequest request);
  ~Completion();  // cancels whatever is still running

  // Submits every choice. More choices than the engine's queue holds -> 400 (it could never be admitted);
  // queue full -> 503 with Retry-After (the choices already submitted are cancelled).
  std::optional<ApiError> start();
  // Waits for every choice and builds the response (status 200, or an error envelope).
  CompletionResult run(ClientConnection& conn);
  // Streams SSE events to `conn` until [DONE]; returns false when the client went away.
  bool stream(ClientConnection& conn);

  const std::string& id() const { return id_; }
  int prompt_tokens() const;  // usage: each prompt once, not once per choice
  int completion_tokens() const;
  int cached_tokens() const;  // usage: each prompt's first choice's prompt_tokens_details
  double ttft_s() const;  // first token of any choice; -1 if none

 private:
  struct Delta {            // what one engine event produced for one choice
    size_t choice = 0;
    std::string text;
    size_t logprobs_end = 0;  // logprob entries of this choice up to and including this event
    bool finished = false;    // this event finished the choice
  };
  // Waits up to `wait` for events and appends what they produced; false when all are done.
  bool pump(std::chrono::milliseconds wait, std::vector<Delta>* deltas);
  std::optional<ApiError> failure() const;
  void cancel_all();
  void record_metrics();

  CompletionContext ctx_;
  CompletionRequest req_;
  std::string id_;
  int64_t created_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::unique_ptr<CompletionChoice>> choices_;
  bool recorded_ = false;
};

}  // namespace flashserve
