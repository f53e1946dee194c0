// The request fields /v1/completions and /v1/chat/completions share, parsed and validated the same
// way for both (openai_api.cpp and openai_chat.cpp hold what differs). Internal to server/: a
// failed check throws an ApiError, which the endpoint's parse function returns.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/openai_api.h"

namespace flashserve::request {

// The body as a JSON object: too deeply nested, not JSON, or not an object -> 400.
nlohmann::json parse_object(std::string_view body);
// Any field not in `known` -> 400 unknown_parameter naming it.
void reject_unknown(const nlohmann::json& j, const std::set<std::string>& known);
bool has(const nlohmann::json& j, const char* key);  // present and not null

// Integer in [lo, hi] (JSON integers only: 1.0 and true are refused).
int64_t get_int(const nlohmann::json& v, const std::string& name, int64_t lo, int64_t hi,
                const char* code = "");
// Number in [lo, hi] (`open_lo` excludes lo), also as the 32-bit float the sampler will use.
float get_float(const nlohmann::json& v, const std::string& name, double lo, double hi,
                bool open_lo = false);
bool get_bool(const nlohmann::json& v, const std::string& name);
int64_t get_max_tokens(const nlohmann::json& v, const std::string& name);

// model, user, n, the sampling fields (starting from model.sampling_defaults), seed,
// logit_bias, stop, stream, stream_options, ignore_eos.
void parse_common(const nlohmann::json& j, const ServedModel& model, CompletionRequest* r);

// Bytes of prompt text that could still fit the context (each token is at most
// max_piece_bytes() bytes); longer text is refused before it is encoded.
size_t max_prompt_bytes(const ServedModel& model, const Tokenizer& tokenizer);
// Every prompt + max_tokens must fit max_model_len; `prompt_param` names the field blamed when
// the prompt alone does not fit.
void check_context(const CompletionRequest& r, int64_t max_tokens, const ServedModel& model,
                   const char* prompt_param);

// Runs `parse`, turning a thrown ApiError (or an unforeseen exception) into the returned error.
std::variant<CompletionRequest, ApiError> catching(const std::function<CompletionRequest()>& parse);

}  // namespace flashserve::request
