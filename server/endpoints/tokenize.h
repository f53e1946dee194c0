// The small JSON endpoints beside completions, as pure functions of the body (unit-tested like
// openai_api): POST /tokenize and /detokenize in vLLM's shapes, and GET /v1/models/{id}.
// Each returns the response JSON or the ApiError to send.
#pragma once

#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api/openai_api.h"

namespace flashserve {

class Tokenizer;

using JsonOrError = std::variant<nlohmann::json, ApiError>;

// {"prompt": text, "add_special_tokens": bool = true (BOS first)} or {"messages": [...],
// "add_generation_prompt": bool = true, "add_special_tokens": bool = false} (rendered with the
// model's chat template) -> {"tokens": [...], "count": N, "max_model_len": M}.
JsonOrError tokenize_response(std::string_view body, const ServedModel& model,
                              const Tokenizer& tokenizer);

// {"tokens": [ids in [0, vocab_size)]} -> {"prompt": text} (special ids decode to nothing).
JsonOrError detokenize_response(std::string_view body, const ServedModel& model,
                                const Tokenizer& tokenizer);

// The model object of /v1/models for `id`, or a 404 model_not_found in OpenAI's shape.
JsonOrError model_response(const std::string& id, const ServedModel& model);

}  // namespace flashserve
