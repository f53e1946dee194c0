// /v1/responses output (see responses_output.h): items, usage and the response object, and the
// translation of a whole chat.completion body into one.
#include "server/endpoints/responses_output.h"

#include <algorithm>
#include <cstdio>

#include "server/endpoints/responses_store.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

std::string random_id(std::string_view prefix) {
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(random_u64()),
                static_cast<unsigned long long>(random_u64()));
  return std::string(prefix) + hex;
}

json output_text_part(const std::string& text) {
  return json{{"type", "output_text"},
              {"text", text},
              {"annotations", json::array()},
              {"logprobs", json::array()}};
}

json reasoning_text_part(const std::string& text) {
  return json{{"type", "reasoning_text"}, {"text", text}};
}

json message_item(const std::string& id, const std::string& text, const char* status) {
  return json{{"type", "message"},
              {"id", id},
              {"status", status},
              {"role", "assistant"},
              {"content", json::array({output_text_part(text)})}};
}

// The text goes in `content` as reasoning_text (as open-weight models' reasoning is returned);
// `summary` stays empty: no summary is written.
json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  return json{{"type", "reasoning"},
              {"id", id},
              {"status", status},
              {"summary", json::array()},
              {"content", json::array({reasoning_text_part(text)})}};
}

json function_call_item(const std::string& id, const std::string& call_id, const std::string& name,
                        const std::string& arguments, const char* status) {
  return json{{"type", "function_call"}, {"id", id},           {"call_id", call_id},
              {"name", name},            {"arguments", arguments}, {"status", status}};
}

json responses_usage(const json& chat_usage, const std::string& reasoning,
                     const Tokenizer& tokenizer) {
  if (!chat_usage.is_object()) return nullptr;
  const int input = chat_usage.value("prompt_tokens", 0);
  const int output = chat_usage.value("completion_tokens", 0);
  int cached = 0;
  if (chat_usage.contains("prompt_tokens_details")) {
    cached = chat_usage["prompt_tokens_details"].value("cached_tokens", 0);
  }
  int reasoning_tokens = 0;
  if (!reasoning.empty()) {
    reasoning_tokens = std::min(output, int(tokenizer.encode(reasoning, false).size()));
  }
  return json{{"input_tokens", input},
              {"input_tokens_details", {{"cached_tokens", cached}}},
              {"output_tokens", output},
              {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
              {"total_tokens", input + output}};
}

json response_object(const ResponsesTurn& turn, const std::string& status, json output, json usage,
                     json error) {
  json r = {{"id", turn.id},
            {"object", "response"},
            {"created_at", turn.created_at},
            {"status", status},
            {"error", std::move(error)},
            {"incomplete_details", nullptr},
            {"model", turn.model},
            {"output", std::move(output)},
            {"usage", std::move(usage)}};
  if (status == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
  r.update(turn.request_fields);
  return r;
}

json response_from_chat(const ResponsesTurn& turn, const json& chat, const Tokenizer& tokenizer) {
  const json& choice = chat.at("choices").at(0);
  const json& m = choice.at("message");
  const bool cut = choice["finish_reason"] == "length";
  json output = json::array();
  const std::string reasoning =
      m.contains("reasoning_content") && m["reasoning_content"].is_string()
          ? m["reasoning_content"].get<std::string>() : "";
  if (!reasoning.empty()) {
    output.push_back(reasoning_item(random_id("rs_"), reasoning, "completed"));
  }
  const std::string text = m["content"].is_string() ? m["content"].get<std::string>() : "";
  const json calls = m.value("tool_calls", json::array());
  if (!text.empty() || calls.empty()) {
    output.push_back(message_item(random_id("msg_"), text, cut ? "incomplete" : "completed"));
  }
  for (const json& c : calls) {
    output.push_back(function_call_item(random_id("fc_"), c["id"], c["function"]["name"],
                                        c["function"]["arguments"], "completed"));
  }
  return response_object(turn, cut ? "incomplete" : "completed", std::move(output),
                         responses_usage(chat["usage"], reasoning, tokenizer));
}

void keep_response(ResponsesStore& store, const ResponsesTurn& turn, const json& response) {
  if (!turn.store || response.value("status", "") == "failed") return;
  store.put(turn.id, StoredResponse{response, turn.input_items});
}

json deleted_response_json(const std::string& id) {
  return json{{"id", id}, {"object", "response"}, {"deleted", true}};
}

}  // namespace flashserve
