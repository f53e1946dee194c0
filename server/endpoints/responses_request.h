// POST /v1/responses at the API edge (OpenAI's Responses schema, docs/SERVER.md): the body is
// checked and translated into the /v1/chat/completions body it means (input items become
// messages, text.format becomes response_format, flattened function tools become chat tools),
// which parse_chat_request then reads, so both endpoints share one pipeline. What this server
// cannot honour (images, files, built-in tools) is a 400 naming it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api/openai_api.h"

namespace flashserve {

class Tokenizer;
class ResponsesStore;

// What a response object carries besides its output, fixed when the request is read.
struct ResponsesTurn {
  std::string id;                 // "resp_..."
  int64_t created_at = 0;         // unix seconds
  std::string model;              // the served model's name
  nlohmann::json request_fields;  // echoed: instructions, max_output_tokens, temperature, ...
  nlohmann::json input_items;     // the conversation's input items, the previous turns' first
  bool store = true;
};

struct ResponsesRequest {
  CompletionRequest chat;  // the chat pipeline's request
  ResponsesTurn turn;
};

// The translation alone: `history` (the previous response's input and then output items) goes
// before the body's input. Throws ApiError.
struct ChatTranslation {
  nlohmann::ordered_json chat_body;  // key order kept: schemas are written in their order
  nlohmann::json request_fields;
  nlohmann::json input_items;        // history + the body's input, as items
  bool store = true;
};
ChatTranslation responses_to_chat(const nlohmann::ordered_json& body,
                                  const nlohmann::ordered_json& history, const ServedModel& model);

// Appends the chat messages for `items` (a list of input items) to `messages`; `where` names
// the list in errors ("input" or "previous_response_id"). Reasoning items are dropped.
void append_input_messages(const nlohmann::ordered_json& items, const std::string& where,
                           nlohmann::ordered_json* messages);

// Reads and translates a POST /v1/responses body; previous_response_id is looked up in `store`.
// A chat error's names are given in Responses terms (max_output_tokens, text.format, input...).
std::variant<ResponsesRequest, ApiError> parse_responses_request(std::string_view body,
                                                                 const ServedModel& model,
                                                                 const Tokenizer& tokenizer,
                                                                 ResponsesStore& store);

// The 404 for an id that is not in the store (never stored, deleted, evicted or expired).
ApiError response_not_found(const std::string& id);

}  // namespace flashserve
