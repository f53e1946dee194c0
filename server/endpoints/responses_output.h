// /v1/responses output: the response object and its items (reasoning, message, function_call)
// built from what the chat pipeline returned, whole from a chat.completion body (non-streamed)
// or item by item from chat chunks (responses_stream.h); usage in the Responses names; and the
// store's bookkeeping for a finished response.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/endpoints/responses_request.h"

namespace flashserve {

class Tokenizer;
class ResponsesStore;

// `prefix` + 32 hex digits ("resp_", "msg_", "fc_", "rs_").
std::string random_id(std::string_view prefix);

// A message's output_text part and a reasoning item's reasoning_text part.
nlohmann::json output_text_part(const std::string& text);
nlohmann::json reasoning_text_part(const std::string& text);

// Items as the output lists them; `status` is "in_progress", "completed" or "incomplete".
nlohmann::json message_item(const std::string& id, const std::string& text, const char* status);
nlohmann::json reasoning_item(const std::string& id, const std::string& text, const char* status);
nlohmann::json function_call_item(const std::string& id, const std::string& call_id,
                                  const std::string& name, const std::string& arguments,
                                  const char* status);

// Usage from a chat usage object: input/output/total tokens and their details. The reasoning
// tokens are counted by encoding `reasoning` (the engine counts tokens, not where they went).
nlohmann::json responses_usage(const nlohmann::json& chat_usage, const std::string& reasoning,
                               const Tokenizer& tokenizer);

// The response object: the turn's id, model and echoed fields with `status` ("in_progress",
// "completed", "incomplete" (cut at max_output_tokens) or "failed"), output, usage and error.
nlohmann::json response_object(const ResponsesTurn& turn, const std::string& status,
                               nlohmann::json output, nlohmann::json usage,
                               nlohmann::json error = nullptr);

// A non-streamed chat.completion body as the response object: reasoning, then the message (when
// it has text or nothing was called), then the function calls.
nlohmann::json response_from_chat(const ResponsesTurn& turn, const nlohmann::json& chat,
                                  const Tokenizer& tokenizer);

// Stores a finished response for GET and previous_response_id when the request asked for it
// (`store`, the default) and it did not fail.
void keep_response(ResponsesStore& store, const ResponsesTurn& turn,
                   const nlohmann::json& response);

// DELETE /v1/responses/{id}'s answer.
nlohmann::json deleted_response_json(const std::string& id);

}  // namespace flashserve
