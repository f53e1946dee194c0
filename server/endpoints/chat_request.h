// POST /v1/chat/completions at the API edge: the body parsed, its messages rendered with the
// chat template and encoded, into the same CompletionRequest as /v1/completions (format kChat);
// and the --reasoning-parser switch the chat output is split by.
#pragma once

#include <string_view>
#include <variant>

#include "server/api/openai_api.h"

namespace flashserve {

class ChatTemplate;

// Parses and validates a POST /v1/chat/completions body (OpenAI's schema, docs/SERVER.md): the
// messages are rendered with model.chat_template and encoded with special tokens only where the
// template wrote them (tokenizer/special_split.h); tools, tool_choice and response_format become
// the request's constraint and tool-call format. What is not implemented (images, audio, the
// legacy functions fields, any unknown field) is a 400 naming the field.
std::variant<CompletionRequest, ApiError> parse_chat_request(std::string_view body,
                                                             const ServedModel& model,
                                                             const Tokenizer& tokenizer);

// --reasoning-parser NAME: "none" is off; "deepseek_r1" and "qwen3" are on (both write
// <think>...</think>; whether the prompt opened it is read per request); "auto" is on when the
// chat template speaks of <think>. Throws flashserve::Error for any other name.
bool reasoning_parser_enabled(std::string_view flag, const ChatTemplate* chat_template);

}  // namespace flashserve
