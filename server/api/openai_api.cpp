// The OpenAI API's shared pieces (see openai_api.h): choices and envelopes of both endpoints,
// usage, logprobs (legacy and chat shapes), /v1/models, SSE framing and the tenant cache salt.
// Pure functions over nlohmann::json.
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>

#include "server/api/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;  // continuation bytes
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if ((c & 0xF0) == 0xE0) n = 2;
    else if (c >= 0xF0 && c <= 0xF4) n = 3;
    else return false;
    if (i + n >= s.size() && n > 0) return false;
    for (size_t k = 1; k <= n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n + 1;
  }
  return true;
}

std::string token_bytes(const Tokenizer& tokenizer, int32_t id) {
  std::string piece = tokenizer.piece(id);
  unsigned byte = 0;
  char tail = 0;
  std::string text;
  if (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%2X>%c", &byte, &tail) == 1) {
    text.push_back(static_cast<char>(byte));  // byte-fallback piece
  } else {
    const std::string kSpace = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's space
    for (size_t i = 0; i < piece.size();) {
      if (piece.compare(i, kSpace.size(), kSpace) == 0) {
        text.push_back(' ');
        i += kSpace.size();
      } else {
        text.push_back(piece[i++]);
      }
    }
  }
  return text;
}

std::string token_text(const Tokenizer& tokenizer, int32_t id) {
  const std::string text = token_bytes(tokenizer, id);
  if (is_valid_utf8(text)) return text;
  std::string out = "bytes:";
  char buf[8];
  for (unsigned char c : text) {
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  }
  return out;
}

namespace {

// A chat logprobs entry: {"token", "logprob", "bytes"} (+ "top_logprobs" for the chosen token).
json chat_entry(const Tokenizer& tokenizer, int32_t id, float logprob) {
  json bytes = json::array();
  for (unsigned char b : token_bytes(tokenizer, id)) bytes.push_back(int(b));
  return json{{"token", token_text(tokenizer, id)}, {"logprob", logprob}, {"bytes", bytes}};
}

json slice(const json& all, size_t begin, size_t end) {
  return json(all.begin() + static_cast<long>(begin), all.begin() + static_cast<long>(end));
}

}  // namespace

void LogprobsAccumulator::add(const Tokenizer& tokenizer, const SampledToken& t, size_t offset,
                              bool has_top) {
  if (format == ResponseFormat::kChat) {  // generated tokens only: logprob never NaN here
    json entry = chat_entry(tokenizer, t.token, t.logprob);
    entry["top_logprobs"] = json::array();
    for (const auto& [id, lp] : t.top_logprobs) {
      entry["top_logprobs"].push_back(chat_entry(tokenizer, id, lp));
    }
    content.push_back(std::move(entry));
    return;
  }
  tokens.push_back(token_text(tokenizer, t.token));
  token_logprobs.push_back(std::isnan(t.logprob) ? json(nullptr) : json(t.logprob));
  if (has_top && !std::isnan(t.logprob)) {
    json top = json::object();
    for (const auto& [id, lp] : t.top_logprobs) top[token_text(tokenizer, id)] = lp;
    top_logprobs.push_back(top);
  } else {
    top_logprobs.push_back(nullptr);
  }
  text_offset.push_back(offset);
}

json LogprobsAccumulator::part(size_t begin, size_t end) const {
  if (format == ResponseFormat::kChat) return json{{"content", slice(content, begin, end)}};
  return json{{"tokens", slice(tokens, begin, end)},
              {"token_logprobs", slice(token_logprobs, begin, end)},
              {"top_logprobs", slice(top_logprobs, begin, end)},
              {"text_offset", slice(text_offset, begin, end)}};
}

json usage_json(const Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json choice_json(int index, const std::string& text, const json& logprobs,
                 const std::string& finish_reason) {
  return json{{"index", index},
              {"text", text},
              {"logprobs", logprobs},
              {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
}

json chat_choice_json(int index, const std::string& text, const json& logprobs,
                      const std::string& finish_reason) {
  return json{{"index", index},
              {"message", {{"role", "assistant"}, {"content", text}}},
              {"logprobs", logprobs},
              {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
}

json chat_delta_json(int index, const json& delta, const json& logprobs,
                     const std::string& finish_reason) {
  return json{{"index", index},
              {"delta", delta},
              {"logprobs", logprobs},
              {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
}

json response_json(ResponseFormat format, bool chunk, const std::string& id, int64_t created,
                   const std::string& model, json choices, const json& usage) {
  const char* object = format == ResponseFormat::kCompletion ? "text_completion"
                       : chunk                               ? "chat.completion.chunk"
                                                             : "chat.completion";
  json j = {{"id", id},
            {"object", object},
            {"created", created},
            {"model", model},
            {"choices", std::move(choices)}};
  if (!usage.is_null()) j["usage"] = usage;
  return j;
}

json completion_json(const std::string& id, int64_t created, const std::string& model,
                     json choices, const json& usage) {
  return response_json(ResponseFormat::kCompletion, false, id, created, model, std::move(choices),
                       usage);
}

json models_json(const ServedModel& model) {
  json m = {{"id", model.id},
            {"object", "model"},
            {"created", model.created},
            {"owned_by", "flashserve"},
            {"max_model_len", model.max_model_len},
            {"chat_template", model.chat_template != nullptr}};
  return json{{"object", "list"}, {"data", json::array({m})}};
}

std::string tenant_cache_salt(std::string_view api_key, std::string_view cache_salt) {
  return std::to_string(api_key.size()) + ":" + std::string(api_key) + std::string(cache_salt);
}

uint64_t random_u64() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  return rng();
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) { return "data: " + dump_json(j) + "\n\n"; }

}  // namespace flashserve
