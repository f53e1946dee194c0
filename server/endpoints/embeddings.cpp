// POST /v1/embeddings (server/endpoints/embeddings.h): the body read with the same guards as the
// completion endpoints (request_fields.h), the inputs run as prefill-only engine requests, and
// the vectors written in OpenAI's shape.
#include "server/endpoints/embeddings.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "server/api/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

std::vector<int32_t> token_ids(const json& list, const std::string& param,
                               const ServedModel& model) {
  std::vector<int32_t> ids;
  for (const json& t : list)
    ids.push_back(int32_t(request::get_int(t, param, 0, model.vocab_size - 1)));
  return ids;
}

// Every form of `input`, as token ids: a string, a list of strings, a list of token ids (one
// input) or a list of lists of token ids.
std::vector<std::vector<int32_t>> read_inputs(const json& j, const ServedModel& model,
                                              const Tokenizer& tokenizer) {
  if (!request::has(j, "input"))
    throw bad_request("'input' is required: a string, a list of strings or token ids", "input");
  const json& in = j["input"];
  auto text = [&](const json& s) {
    const std::string t = s.get<std::string>();
    if (t.empty()) throw bad_request("'input' must not contain empty strings", "input");
    request::check_prompt_bytes(t.size(), "an input", "input", model, tokenizer);
    return tokenizer.encode(t, /*add_bos=*/true);
  };
  if (in.is_string()) return {text(in)};
  if (!in.is_array() || in.empty())
    throw bad_request(
        "'input' must be a non-empty string, or a non-empty list of strings, of "
        "token ids, or of lists of token ids",
        "input");
  if (in.size() > kMaxEmbeddingInputs)
    throw bad_request("'input' has " + std::to_string(in.size()) + " items; at most " +
                          std::to_string(kMaxEmbeddingInputs) + " are allowed",
                      "input");
  std::vector<std::vector<int32_t>> out;
  if (in[0].is_number()) return {token_ids(in, "input", model)};
  for (const json& item : in) {
    if (item.is_string() && in[0].is_string()) {
      out.push_back(text(item));
    } else if (item.is_array() && in[0].is_array()) {
      if (item.empty()) throw bad_request("'input' must not contain empty token lists", "input");
      out.push_back(token_ids(item, "input", model));
    } else {
      throw bad_request("'input' items must all be strings or all be lists of token ids", "input");
    }
  }
  return out;
}

EmbeddingsRequest parse(std::string_view body, const ServedModel& model,
                        const Tokenizer& tokenizer) {
  const json j = request::parse_object(body);
  request::check_fields_and_model(j, model,
                                  {"input", "model", "encoding_format", "dimensions", "user"});
  if (request::has(j, "user") && !j["user"].is_string())
    throw bad_request("'user' must be a string", "user");
  EmbeddingsRequest r;
  if (request::has(j, "encoding_format")) {
    const json& f = j["encoding_format"];
    if (!f.is_string() || (f != "float" && f != "base64"))
      throw bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
    r.base64 = f == "base64";
  }
  if (request::has(j, "dimensions"))
    r.dimensions =
        int(request::get_int(j["dimensions"], "dimensions", 1, model.embedding_dimensions));
  r.inputs = read_inputs(j, model, tokenizer);
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const int64_t n = int64_t(r.inputs[i].size());
    const int64_t room = model.kv_cache_tokens > 0
                             ? std::min<int64_t>(model.max_model_len, model.kv_cache_tokens)
                             : model.max_model_len;
    if (n > room)
      throw bad_request("input " + std::to_string(i) + " has " + std::to_string(n) +
                            " tokens; this model's context holds " + std::to_string(room),
                        "input", "context_length_exceeded");
  }
  return r;
}

void put_le32(uint32_t v, char* out) {
  for (int b = 0; b < 4; ++b) out[b] = char((v >> (8 * b)) & 0xff);
}

std::string base64(const std::string& bytes) {
  static const char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? uint8_t(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace

std::variant<EmbeddingsRequest, ApiError> parse_embeddings_request(std::string_view body,
                                                                   const ServedModel& model,
                                                                   const Tokenizer& tokenizer) {
  try {
    return parse(body, model, tokenizer);
  } catch (...) {
    return request::caught_error(std::current_exception());
  }
}

std::vector<float> normalized_embedding(std::span<const float> hidden, int dimensions) {
  const size_t n = dimensions > 0 ? std::min(hidden.size(), size_t(dimensions)) : hidden.size();
  std::vector<float> v(hidden.begin(), hidden.begin() + ptrdiff_t(n));
  double sum = 0;
  for (float x : v) sum += double(x) * double(x);
  const double norm = std::sqrt(sum);
  if (norm > 0)
    for (float& x : v) x = float(double(x) / norm);
  return v;
}

json embedding_value(std::span<const float> v, bool as_base64) {
  if (!as_base64) return json(std::vector<float>(v.begin(), v.end()));
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    put_le32(bits, bytes.data() + 4 * i);
  }
  return base64(bytes);
}

json embeddings_json(const std::vector<std::vector<float>>& vectors, bool as_base64,
                     const std::string& model, int prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i)
    data.push_back({{"object", "embedding"},
                    {"index", i},
                    {"embedding", embedding_value(vectors[i], as_base64)}});
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", model},
          {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

CompletionResult run_embeddings(const CompletionContext& ctx, const EmbeddingsRequest& request,
                                const std::string& cache_salt, ClientConnection& conn) {
  const auto start = std::chrono::steady_clock::now();
  auto error = [](const ApiError& e) {
    return CompletionResult{e.status, error_json(e), e.retry_after_s};
  };
  const size_t n = request.inputs.size();
  if (int64_t(n) > ctx.engine->max_queue())
    return error(bad_request("this request has " + std::to_string(n) +
                                 " inputs, more than this "
                                 "server's queue of " +
                                 std::to_string(ctx.engine->max_queue()) +
                                 " requests (--max-queue) can ever hold; send fewer",
                             "input"));
  std::vector<std::shared_ptr<RequestStream>> streams;
  auto cancel_all = [&] {
    for (auto& s : streams) s->cancel();
  };
  int prompt_tokens = 0;
  for (const auto& ids : request.inputs) {
    GenerationRequest g;
    g.prompt = ids;
    g.embed = true;
    g.cache_salt = cache_salt;
    prompt_tokens += int(ids.size());
    streams.push_back(ctx.engine->submit(std::move(g)));
    if (!streams.back()) {
      streams.pop_back();
      cancel_all();
      return error(server_error(503, "server_overloaded",
                                "The server is overloaded (admission queue full); retry later"));
    }
  }
  std::vector<std::vector<float>> vectors(n);
  std::optional<ApiError> failed;
  for (size_t i = 0; i < n; ++i) {
    for (bool finished = false; !finished;) {
      if (conn.gone()) {
        cancel_all();
        if (ctx.metrics) ctx.metrics->count_disconnect();
        return CompletionResult{499, json(), 0, true};
      }
      std::optional<StreamEvent> ev = streams[i]->next(ctx.poll);
      if (!ev) continue;
      if (ev->kind == StreamEvent::Kind::kEmbedding)
        vectors[i] = normalized_embedding(ev->embedding, request.dimensions);
      if (ev->kind != StreamEvent::Kind::kFinished) continue;
      finished = true;
      if (ev->finish == FinishReason::kStop && vectors[i].empty() && !failed)
        failed =
            server_error(500, "engine_error", "The engine finished an input without its vector");
      if (ev->finish == FinishReason::kError && !failed)
        failed = server_error(500, "engine_error", "The engine failed this request: " + ev->error);
      if (ev->finish == FinishReason::kAbort && !failed)
        failed = server_error(503, "request_aborted",
                              "The request was aborted (the server is shutting down)");
    }
  }
  if (ctx.metrics)
    ctx.metrics->observe_e2e(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (failed) return error(*failed);
  return CompletionResult{200,
                          embeddings_json(vectors, request.base64, ctx.model->id, prompt_tokens)};
}

std::optional<ApiError> task_mismatch(const ServedModel& model, std::string_view endpoint) {
  const bool embedder = model.embedding_dimensions > 0;
  if ((endpoint == "/v1/embeddings") == embedder) return std::nullopt;
  const std::string where(endpoint);
  if (embedder)
    return bad_request("'" + model.id +
                           "' is an embedding model (--task embed): it serves "
                           "/v1/embeddings, not " +
                           where,
                       "model", "wrong_model_task");
  return bad_request(
      "'" + model.id +
          "' is a generation model: it does not serve "
          "/v1/embeddings (start the server with --task embed and an embedding model)",
      "model", "wrong_model_task");
}

}  // namespace flashserve
