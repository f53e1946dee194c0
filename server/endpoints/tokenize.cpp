// POST /tokenize, /detokenize and GET /v1/models/{id} (server/endpoints/tokenize.h). Bodies are read
// with the same guards as the completion endpoints (request_fields.h): an unknown field, a wrong
// type or an id outside the model's vocabulary is a 400 naming the field.
#include "server/endpoints/tokenize.h"

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "server/api/request_fields.h"
#include "tokenizer/special_split.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

bool bool_field(const json& j, const char* key, bool fallback) {
  return request::has(j, key) ? request::get_bool(j[key], key) : fallback;
}

// A message's text: a string, or a list of {"type": "text", "text": ...} parts joined.
std::string message_text(const json& m, const std::string& where) {
  if (!request::has(m, "content")) return "";
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw bad_request("'" + where + ".content' must be a string or a list", where);
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw bad_request("'" + where + ".content' parts must be {\"type\": \"text\", \"text\": ...}",
                        where + ".content");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::vector<int32_t> chat_ids(const json& j, const ServedModel& model, const Tokenizer& tokenizer) {
  const json& ms = j["messages"];
  if (!ms.is_array() || ms.empty())
    throw bad_request("'messages' must be a non-empty list", "messages");
  if (!model.chat_template)
    throw bad_request("This model has no chat template, so 'messages' cannot be rendered; send "
                      "'prompt' instead", "messages", "chat_template_missing");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!ms[i].is_object() || !ms[i].contains("role") || !ms[i]["role"].is_string())
      throw bad_request("'" + where + "' must be an object with a string 'role'", where);
    ChatMessage msg;
    msg.role = ms[i]["role"].get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    msg.content = message_text(ms[i], where);
    messages.push_back(std::move(msg));
  }
  RenderedChat rendered;
  try {
    rendered = model.chat_template->render(messages, bool_field(j, "add_generation_prompt", true));
  } catch (const ChatTemplateError& e) {
    throw bad_request(std::string("the chat template rejected these messages: ") + e.what(),
                      "messages", "chat_template_error");
  }
  request::check_prompt_bytes(rendered.text.size(), "the rendered conversation", "messages",
                              model, tokenizer);
  std::vector<int32_t> ids = encode_with_special_tokens(tokenizer, rendered.text, rendered.literal);
  // The template writes BOS itself where the model wants one; add_special_tokens adds another.
  if (bool_field(j, "add_special_tokens", false)) ids.insert(ids.begin(), tokenizer.bos_id());
  return ids;
}

json tokenize(std::string_view body, const ServedModel& model, const Tokenizer& tokenizer) {
  const json j = request::parse_object(body);
  request::check_fields_and_model(
      j, model, {"model", "prompt", "messages", "add_special_tokens", "add_generation_prompt"});
  const bool has_prompt = request::has(j, "prompt"), has_messages = request::has(j, "messages");
  if (has_prompt == has_messages)
    throw bad_request("Send exactly one of 'prompt' (a string) and 'messages'", "prompt");
  std::vector<int32_t> ids;
  if (has_messages) {
    ids = chat_ids(j, model, tokenizer);
  } else {
    if (!j["prompt"].is_string()) throw bad_request("'prompt' must be a string", "prompt");
    if (request::has(j, "add_generation_prompt"))
      throw bad_request("'add_generation_prompt' goes with 'messages'", "add_generation_prompt");
    const std::string prompt = j["prompt"].get<std::string>();
    request::check_prompt_bytes(prompt.size(), "'prompt'", "prompt", model, tokenizer);
    ids = tokenizer.encode(prompt, bool_field(j, "add_special_tokens", true));
  }
  return json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", model.max_model_len}};
}

json detokenize(std::string_view body, const ServedModel& model, const Tokenizer& tokenizer) {
  const json j = request::parse_object(body);
  request::check_fields_and_model(j, model, {"model", "tokens"});
  if (!request::has(j, "tokens") || !j["tokens"].is_array())
    throw bad_request("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const json& t : j["tokens"])
    ids.push_back(int32_t(request::get_int(t, "tokens", 0, model.vocab_size - 1)));
  return json{{"prompt", tokenizer.decode(ids)}};
}

template <class F>
JsonOrError json_or_error(F&& f) {
  try {
    return f();
  } catch (...) {
    return request::caught_error(std::current_exception());
  }
}

}  // namespace

JsonOrError tokenize_response(std::string_view body, const ServedModel& model,
                              const Tokenizer& tokenizer) {
  return json_or_error([&] { return tokenize(body, model, tokenizer); });
}

JsonOrError detokenize_response(std::string_view body, const ServedModel& model,
                                const Tokenizer& tokenizer) {
  return json_or_error([&] { return detokenize(body, model, tokenizer); });
}

JsonOrError model_response(const std::string& id, const ServedModel& model) {
  if (id == model.id) return models_json(model)["data"][0];
  ApiError e = bad_request("The model '" + id + "' does not exist; this server serves '" +
                               model.id + "'", "model", "model_not_found");
  e.status = 404;
  return e;
}

}  // namespace flashserve
