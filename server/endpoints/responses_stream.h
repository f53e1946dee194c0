// Streamed /v1/responses: a ClientConnection that takes the chat pipeline's stream (chat chunks,
// the usage chunk, an error envelope, the end) and writes the Responses typed SSE events in their
// documented order instead, each with `event:` and a sequence_number:
//   response.created, response.in_progress, then per output item
//   response.output_item.added, [response.content_part.added], deltas
//   (response.reasoning_text.delta | response.output_text.delta |
//    response.function_call_arguments.delta), their .done, [response.content_part.done],
//   response.output_item.done; and last response.completed | response.incomplete | response.failed.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/generation/completion.h"
#include "server/endpoints/responses_request.h"

namespace flashserve {

class Tokenizer;

class ResponsesEventWriter : public ClientConnection {
 public:
  ResponsesEventWriter(ClientConnection& out, const ResponsesTurn& turn, const Tokenizer& tokenizer)
      : out_(out), turn_(turn), tokenizer_(tokenizer) {}

  bool gone() override { return out_.gone(); }
  bool write(const std::string& data) override { return out_.write(data); }
  bool send_event(const nlohmann::json& chunk) override;
  bool send_done() override;

  // The final response object (the last event's), once send_done() ran; null before.
  const nlohmann::json& response() const { return final_; }

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  bool emit(const char* type, nlohmann::json fields);
  bool start();                          // response.created and response.in_progress
  bool open(Kind kind, const std::string& call_id = "", const std::string& name = "");
  bool close();                          // the open item's .done events
  bool append(Kind kind, const std::string& delta);
  bool tool_call_delta(const nlohmann::json& call);
  nlohmann::json item_ids() const;       // {item_id, output_index}

  ClientConnection& out_;
  const ResponsesTurn& turn_;
  const Tokenizer& tokenizer_;
  int sequence_ = 0;
  bool started_ = false;
  nlohmann::json output_ = nlohmann::json::array();  // the items closed so far
  Kind kind_ = Kind::kNone;                           // the open item
  std::string item_id_, text_, call_id_, name_;       // text_: its text or arguments so far
  std::string reasoning_;                             // all reasoning text (usage)
  bool has_message_ = false, has_call_ = false;
  std::string finish_reason_;
  nlohmann::json usage_ = nullptr, error_ = nullptr, final_ = nullptr;
};

}  // namespace flashserve
