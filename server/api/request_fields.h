// Reading a request body at the API edge, for both /v1/completions (openai_api.cpp) and
// /v1/chat/completions (openai_chat.cpp): the JSON guards, typed getters with range checks, the
// fields both endpoints share, and the context checks. Each endpoint reads its body in one pass:
// parse_object, read_shared_fields, its own fields, its prompt, set_max_tokens. A failed check
// throws an ApiError; the endpoint's public parse function returns it (caught_error).
#pragma once

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "server/api/openai_api.h"

namespace flashserve::request {

// 400 unknown_parameter for a key of the object `o` outside `keys`, named "<where>.<key>"; 400
// when `o` is not an object. J: nlohmann::json or ordered_json.
template <class J>
void only_keys(const J& o, const std::string& where, std::initializer_list<const char*> keys) {
  if (!o.is_object()) throw bad_request("'" + where + "' must be an object", where);
  for (const auto& [key, value] : o.items()) {
    bool known = false;
    for (const char* k : keys) known = known || key == k;
    if (!known) {
      throw bad_request("unknown parameter '" + where + "." + key + "'", where + "." + key,
                        "unknown_parameter");
    }
  }
}

// The body as a JSON object: too deeply nested, not JSON, or not an object -> 400.
nlohmann::json parse_object(std::string_view body);
// Present and not null. J: nlohmann::json or ordered_json.
template <class J>
bool has(const J& j, const char* key) {
  return j.contains(key) && !j[key].is_null();
}

// Integer in [lo, hi] (JSON integers only: 1.0 and true are refused).
int64_t get_int(const nlohmann::json& v, const std::string& name, int64_t lo, int64_t hi);
// Number in [lo, hi] (`open_lo` excludes lo), also as the 32-bit float the sampler will use.
float get_float(const nlohmann::json& v, const std::string& name, double lo, double hi,
                bool open_lo = false);
bool get_bool(const nlohmann::json& v, const std::string& name);
int64_t get_max_tokens(const nlohmann::json& v, const std::string& name);

// OpenAI fields that do not change the output (retention, routing, billing and caching hints,
// speculative `prediction`): every endpoint accepts and ignores them (docs/SERVER.md, "Unknown
// fields"). Any other field outside an endpoint's own list is a 400, as OpenAI answers it.
const std::set<std::string>& ignored_openai_fields();

// Refuses any field not in `known` or ignored_openai_fields() (400 unknown_parameter naming it)
// and a "model" other than model.id (404 model_not_found).
void check_fields_and_model(const nlohmann::json& j, const ServedModel& model,
                            const std::set<std::string>& known);

// Refuses any field not in `known` (400 unknown_parameter naming it), then reads the fields both
// endpoints share: model, user, cache_salt, n, the sampling fields (starting from
// model.sampling_defaults), seed, logit_bias, ignore_eos, speculative, stop, stream, stream_options.
CompletionRequest read_shared_fields(const nlohmann::json& j, const ServedModel& model,
                                     const std::set<std::string>& known);

// Refuses prompt text of `bytes` bytes that could never fit the context, before it is encoded
// (each token is at most max_piece_bytes() bytes): "<subject> is N bytes; ...", blaming `param`.
void check_prompt_bytes(size_t bytes, const std::string& subject, const char* param,
                        const ServedModel& model, const Tokenizer& tokenizer);

// Every prompt + max_tokens must fit the context (engine/stop_rules.h, fits_context) and the KV
// cache (model.kv_cache_tokens, when known); then r->max_tokens = max_tokens. `prompt_param`
// names the field blamed when the prompt alone does not fit.
void set_max_tokens(CompletionRequest* r, int64_t max_tokens, const ServedModel& model,
                    const char* prompt_param);

// The error an endpoint returns for what its parse threw: the ApiError as thrown, any other
// std::exception (a JSON type error not foreseen) a 400. Call inside a catch (...) block.
ApiError caught_error(std::exception_ptr e);

// Runs an endpoint's parser: its request, or the ApiError it threw (caught_error).
template <class Parse>
std::variant<CompletionRequest, ApiError> parse_or_error(Parse&& parse) {
  try {
    return parse();
  } catch (...) {
    return caught_error(std::current_exception());
  }
}

}  // namespace flashserve::request
