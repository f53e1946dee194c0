// POST /v1/completions at the API edge: the body parsed and validated into a CompletionRequest
// (docs/API_CONTRACT.md), or the ApiError that answers it.
#pragma once

#include <string_view>
#include <variant>

#include "server/api/openai_api.h"

namespace flashserve {

// Parses and validates a POST /v1/completions body. Text prompts are encoded with `tokenizer`
// (BOS first). Every field of docs/API_CONTRACT.md is handled; any other field is a 400.
std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   const ServedModel& model,
                                                                   const Tokenizer& tokenizer);

}  // namespace flashserve
