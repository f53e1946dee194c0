// Reading a request body at the API edge (see request_fields.h): JSON guards, typed getters
// with range checks, the shared fields (sampling, stop strings, logit_bias, streaming options),
// and the context checks.
#include "server/api/request_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/json_text.h"
#include "engine/stop_rules.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::request {

using json = nlohmann::json;

namespace {

constexpr int kMaxJsonDepth = 32;  // requests are shallow; deeper nesting is refused unparsed

void reject_unknown(const json& j, const std::set<std::string>& known) {
  for (const auto& [key, value] : j.items()) {
    if (!known.count(key) && !ignored_openai_fields().count(key)) {
      throw bad_request("unknown parameter '" + key + "'", key, "unknown_parameter");
    }
  }
}

void parse_stop(const json& v, CompletionRequest* r) {
  auto add = [&](const json& s) {
    if (!s.is_string()) throw bad_request("'stop' must be a string or a list of strings", "stop");
    if (s.get<std::string>().empty()) throw bad_request("'stop' strings must not be empty", "stop");
    if (s.get<std::string>().size() > kMaxStopBytes) {
      throw bad_request("'stop' strings may be at most " + std::to_string(kMaxStopBytes) +
                            " bytes long", "stop");
    }
    r->stop.push_back(s.get<std::string>());
  };
  if (v.is_array()) {
    if (v.size() > static_cast<size_t>(kMaxStops)) {
      throw bad_request("'stop' may hold at most " + std::to_string(kMaxStops) + " strings",
                        "stop");
    }
    for (const auto& s : v) add(s);
  } else {
    add(v);
  }
}

void parse_logit_bias(const json& v, const ServedModel& model, SamplingParams* s) {
  if (!v.is_object()) throw bad_request("'logit_bias' must be an object", "logit_bias");
  for (const auto& [key, bias] : v.items()) {
    bool digits = !key.empty() && key.size() <= 9 &&
                  std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    int64_t id = digits ? std::stoll(key) : -1;
    if (id < 0 || id >= model.vocab_size) {
      throw bad_request("'logit_bias' keys must be token ids in [0, " +
                            std::to_string(model.vocab_size) + "), got \"" + key + "\"",
                        "logit_bias");
    }
    s->logit_bias.emplace_back(static_cast<int32_t>(id), get_float(bias, "logit_bias", -100, 100));
  }
  std::sort(s->logit_bias.begin(), s->logit_bias.end());
}

}  // namespace

const std::set<std::string>& ignored_openai_fields() {
  static const std::set<std::string> k = {
      "store", "metadata", "service_tier", "prediction", "safety_identifier",
      "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options"};
  return k;
}

json parse_object(std::string_view body) {
  if (json_nesting_depth(body) > kMaxJsonDepth) throw bad_request("request JSON is nested too deeply");
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad_request("request body is not valid JSON");
  if (!j.is_object()) throw bad_request("request body must be a JSON object");
  return j;
}

// Integer in [lo, hi] (JSON integers only: 1.0 and true are refused).
int64_t get_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw bad_request("'" + name + "' must be an integer", name);
  bool too_big = v.is_number_unsigned() &&
                 v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  int64_t x = too_big ? std::numeric_limits<int64_t>::max() : v.get<int64_t>();
  if (x < lo || x > hi) {
    throw bad_request("'" + name + "' must be between " + std::to_string(lo) + " and " +
                          std::to_string(hi) + ", got " + v.dump(),
                      name);
  }
  return x;
}

// Number in [lo, hi]; `open_lo` excludes lo. Checked twice: as the JSON double, and as the
// float the sampler will use, because narrowing can leave the range (top_p 1e-50 becomes 0,
// repetition_penalty 1e300 becomes inf) and the engine would then fail the request with a 500.
float get_float(const json& v, const std::string& name, double lo, double hi,
                bool open_lo) {
  if (!v.is_number()) throw bad_request("'" + name + "' must be a number", name);
  const double x = v.get<double>();
  const float f = static_cast<float>(x);
  auto in_range = [&](double y) {
    return std::isfinite(y) && (open_lo ? y > lo : y >= lo) && y <= hi;
  };
  if (!in_range(x) || !in_range(static_cast<double>(f))) {
    std::string range = std::string(open_lo ? "(" : "[") + json(lo).dump() + ", " +
                        (std::isinf(hi) ? std::string("inf)") : json(hi).dump() + "]");
    std::string as_float = in_range(x) ? " (" + json(f).dump() + " as a 32-bit float)" : "";
    throw bad_request("'" + name + "' must be in " + range + ", got " + v.dump() + as_float,
                      name);
  }
  return f;
}

bool get_bool(const json& v, const std::string& name) {
  if (!v.is_boolean()) throw bad_request("'" + name + "' must be a boolean", name);
  return v.get<bool>();
}

int64_t get_max_tokens(const json& v, const std::string& name) {
  return get_int(v, name, 0, std::numeric_limits<int64_t>::max());
}

void check_fields_and_model(const json& j, const ServedModel& model,
                            const std::set<std::string>& known) {
  reject_unknown(j, known);
  if (!has(j, "model")) return;
  if (!j["model"].is_string()) throw bad_request("'model' must be a string", "model");
  if (j["model"].get<std::string>() != model.id) {
    ApiError e = bad_request("The model '" + j["model"].get<std::string>() +
                                 "' does not exist; this server serves '" + model.id + "'",
                             "model", "model_not_found");
    e.status = 404;
    throw e;
  }
}

CompletionRequest read_shared_fields(const json& j, const ServedModel& model,
                                     const std::set<std::string>& known) {
  check_fields_and_model(j, model, known);
  CompletionRequest r;
  auto present = [&](const char* k) { return has(j, k); };
  if (present("user") && !j["user"].is_string()) throw bad_request("'user' must be a string", "user");
  if (present("user")) r.user = j["user"].get<std::string>();
  if (present("cache_salt")) {
    const json& v = j["cache_salt"];
    if (!v.is_string() || v.get<std::string>().size() > kMaxCacheSaltBytes) {
      throw bad_request("'cache_salt' must be a string of at most " +
                            std::to_string(kMaxCacheSaltBytes) + " bytes", "cache_salt");
    }
    r.cache_salt = v.get<std::string>();
  }
  if (present("n")) r.n = static_cast<int>(get_int(j["n"], "n", 1, kMaxChoices));

  SamplingParams& s = r.sampling;
  s = model.sampling_defaults;
  if (present("temperature")) s.temperature = get_float(j["temperature"], "temperature", 0, 2);
  if (present("top_p")) s.top_p = get_float(j["top_p"], "top_p", 0, 1, /*open_lo=*/true);
  if (present("top_k")) {
    int64_t k = get_int(j["top_k"], "top_k", -1, std::numeric_limits<int>::max());
    s.top_k = k <= 0 ? 0 : static_cast<int>(k);
  }
  if (present("min_p")) s.min_p = get_float(j["min_p"], "min_p", 0, 1);
  if (present("presence_penalty")) {
    s.presence_penalty = get_float(j["presence_penalty"], "presence_penalty", -2, 2);
  }
  if (present("frequency_penalty")) {
    s.frequency_penalty = get_float(j["frequency_penalty"], "frequency_penalty", -2, 2);
  }
  if (present("repetition_penalty")) {
    s.repetition_penalty = get_float(j["repetition_penalty"], "repetition_penalty", 0,
                                     std::numeric_limits<double>::infinity(), /*open_lo=*/true);
  }
  if (present("seed")) {
    const json& v = j["seed"];
    if (!v.is_number_integer()) throw bad_request("'seed' must be an integer", "seed");
    s.seed = v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
    r.has_seed = true;
  }
  if (present("logit_bias")) parse_logit_bias(j["logit_bias"], model, &s);
  if (present("ignore_eos")) r.ignore_eos = get_bool(j["ignore_eos"], "ignore_eos");
  if (present("speculative")) {
    r.speculative = get_bool(j["speculative"], "speculative");
    if (r.speculative && !model.speculative) {
      throw bad_request("'speculative' is true, but this server runs without speculative "
                        "decoding (start it with --speculative)", "speculative");
    }
  }
  if (present("stop")) parse_stop(j["stop"], &r);
  if (present("stream")) r.stream = get_bool(j["stream"], "stream");
  if (present("stream_options")) {
    const json& so = j["stream_options"];
    if (!r.stream) {
      throw bad_request("'stream_options' is only allowed when 'stream' is true",
                        "stream_options");
    }
    if (!so.is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    for (const auto& [key, value] : so.items()) {
      if (key != "include_usage") {
        throw bad_request("unknown parameter 'stream_options." + key + "'", "stream_options",
                          "unknown_parameter");
      }
      if (!value.is_null()) r.include_usage = get_bool(value, "stream_options.include_usage");
    }
  }
  return r;
}

void check_prompt_bytes(size_t bytes, const std::string& subject, const char* param,
                        const ServedModel& model, const Tokenizer& tokenizer) {
  // Encoding costs microseconds per byte, so a prompt that can never fit is refused unread:
  // each token stands for at most max_piece_bytes() bytes. The factor leaves room for
  // normalisation that shrinks text before encoding (e.g. collapsed whitespace).
  const size_t max_bytes = kPromptBytesFactor * size_t(std::max(model.max_model_len, 1)) *
                           std::max<size_t>(tokenizer.max_piece_bytes(), 1);
  if (bytes > max_bytes) {
    throw bad_request(subject + " is " + std::to_string(bytes) + " bytes; no prompt over " +
                          std::to_string(max_bytes) + " bytes can fit this model's context of " +
                          std::to_string(model.max_model_len) + " tokens",
                      param, "context_length_exceeded");
  }
}

void set_max_tokens(CompletionRequest* r, int64_t max_tokens, const ServedModel& model,
                    const char* prompt_param) {
  for (const auto& p : r->prompts) {
    const int64_t prompt_len = static_cast<int64_t>(p.size());
    if (!fits_context(prompt_len, max_tokens, model.max_model_len)) {
      const bool overflow = max_tokens > std::numeric_limits<int64_t>::max() - prompt_len;
      const int64_t total = overflow ? std::numeric_limits<int64_t>::max() : prompt_len + max_tokens;
      const bool prompt_alone = prompt_len >= model.max_model_len;
      throw bad_request("This model's maximum context length is " +
                            std::to_string(model.max_model_len) + " tokens, but " +
                            std::to_string(total) + " were requested (" +
                            std::to_string(prompt_len) + " in the prompt, " +
                            std::to_string(max_tokens) + " for the completion)",
                        prompt_alone ? prompt_param : "max_tokens", "context_length_exceeded");
    }
  }
  // Within the context, so the sums below cannot overflow. A KV cache smaller than the context
  // (--kv-cache-tokens, or little GPU memory) could never hold such a request.
  for (const auto& p : r->prompts) {
    if (model.kv_cache_tokens > 0 &&
        !fits_context(static_cast<int64_t>(p.size()), max_tokens, model.kv_cache_tokens)) {
      throw bad_request("prompt + max_tokens (" + std::to_string(int64_t(p.size()) + max_tokens) +
                            ") exceeds the KV cache capacity of " +
                            std::to_string(model.kv_cache_tokens) + " tokens",
                        "max_tokens", "context_length_exceeded");
    }
  }
  r->max_tokens = static_cast<int>(std::min<int64_t>(max_tokens, std::numeric_limits<int>::max()));
}

ApiError caught_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const ApiError& api) {
    return api;
  } catch (const std::exception& other) {  // e.g. json type errors we did not foresee: still a 400
    return bad_request(std::string("invalid request: ") + other.what());
  }
}

}  // namespace flashserve::request
