// POST /v1/completions request parsing and validation (docs/API_CONTRACT.md): the prompt forms,
// echo, legacy logprobs; the fields it shares with chat are read by request_fields.h. Nothing
// below the API edge sees unvalidated input. Internally a failed check throws an ApiError, which
// parse_completion_request returns.
#include "server/endpoints/completions_request.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/error.h"
#include "server/api/request_fields.h"
#include "server/api/response_format.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

const std::set<std::string>& completion_fields() {
  static const std::set<std::string> k = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stop",
      "stream", "stream_options", "seed", "presence_penalty", "frequency_penalty",
      "repetition_penalty", "logit_bias", "logprobs", "echo", "best_of", "suffix", "user",
      "ignore_eos", "cache_salt", "speculative", "response_format", "guided_json", "guided_regex",
      "guided_choice", "guided_grammar"};
  return k;
}

std::vector<int32_t> get_token_ids(const json& arr, const ServedModel& model) {
  if (arr.empty()) throw bad_request("'prompt' token list must not be empty", "prompt");
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (const auto& t : arr) {
    if (!t.is_number_integer()) {
      throw bad_request("'prompt' token ids must be integers", "prompt");
    }
    ids.push_back(static_cast<int32_t>(
        request::get_int(t, "prompt", 0, model.vocab_size - 1)));
  }
  return ids;
}

void parse_prompt(const json& p, const ServedModel& model, const Tokenizer& tokenizer,
                  CompletionRequest* r) {
  auto add_text = [&](const std::string& text) {
    request::check_prompt_bytes(text.size(), "'prompt'", "prompt", model, tokenizer);
    try {
      r->prompts.push_back(tokenizer.encode(text, /*add_bos=*/true));
    } catch (const Error&) {
      throw bad_request("'prompt' could not be tokenized (invalid UTF-8?)", "prompt");
    }
    r->echo_texts.push_back(text);
  };
  auto add_ids = [&](const json& arr) {
    r->prompts.push_back(get_token_ids(arr, model));
    r->echo_texts.push_back(tokenizer.decode(r->prompts.back()));
  };
  if (p.is_null()) throw bad_request("'prompt' is required", "prompt");
  if (p.is_string()) return add_text(p.get<std::string>());
  if (!p.is_array()) {
    throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a "
                      "list of token-id lists", "prompt");
  }
  if (p.empty()) throw bad_request("'prompt' must not be an empty list", "prompt");
  auto all = [&](auto pred) { return std::all_of(p.begin(), p.end(), pred); };
  if (p.size() * static_cast<size_t>(r->n) > static_cast<size_t>(kMaxChoices) &&
      (p[0].is_string() || p[0].is_array())) {  // checked before encoding any of them
    throw bad_request("prompts x n must be at most " + std::to_string(kMaxChoices), "n");
  }
  if (all([](const json& x) { return x.is_string(); })) {
    for (const auto& s : p) add_text(s.get<std::string>());
  } else if (all([](const json& x) { return x.is_number(); })) {
    add_ids(p);
  } else if (all([](const json& x) { return x.is_array(); })) {
    for (const auto& ids : p) add_ids(ids);
  } else {
    throw bad_request("'prompt' list must hold only strings, only token ids or only token-id "
                      "lists", "prompt");
  }
}

CompletionRequest parse_completion(std::string_view body, const ServedModel& model,
                        const Tokenizer& tokenizer) {
  const json j = request::parse_object(body);
  CompletionRequest r = request::read_shared_fields(j, model, completion_fields());
  auto has = [&](const char* k) { return request::has(j, k); };
  // Checked against the context once the prompts are tokens, before narrowing to int.
  const int64_t max_tokens =
      has("max_tokens") ? request::get_max_tokens(j["max_tokens"], "max_tokens") : r.max_tokens;
  if (has("best_of")) {
    int64_t best_of = request::get_int(j["best_of"], "best_of", 1, kMaxChoices);
    if (best_of != r.n) {
      throw bad_request("'best_of' is not supported (only best_of == n, which changes nothing)",
                        "best_of", "unsupported_parameter");
    }
  }
  if (has("suffix")) {
    if (!j["suffix"].is_string() || !j["suffix"].get<std::string>().empty()) {
      throw bad_request("'suffix' is not supported", "suffix", "unsupported_parameter");
    }
  }
  if (has("logprobs")) {
    r.logprobs = static_cast<int>(request::get_int(j["logprobs"], "logprobs", 0, kMaxLogprobs));
    r.sampling.logprobs = r.logprobs;
  }
  if (has("echo")) r.echo = request::get_bool(j["echo"], "echo");

  r.constraint = request::read_output_format(j, body, model);
  parse_prompt(j.contains("prompt") ? j["prompt"] : json(), model, tokenizer, &r);
  if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(kMaxChoices)) {
    throw bad_request("prompts x n must be at most " + std::to_string(kMaxChoices), "n");
  }
  request::set_max_tokens(&r, max_tokens, model, "prompt");
  return r;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   const ServedModel& model,
                                                                   const Tokenizer& tokenizer) {
  return request::parse_or_error([&] { return parse_completion(body, model, tokenizer); });
}

}  // namespace flashserve
