// POST /v1/responses request reading (see responses_request.h): the Responses fields become the
// chat body's (instructions a system message first, max_output_tokens max_completion_tokens,
// text.format response_format, reasoning.effort reasoning_effort, flattened function tools the
// nested chat form), the fields a response object echoes are collected, and the chat body goes
// through parse_chat_request. OpenAI fields that would change the output and cannot be honoured
// are 400s naming them (request_fields.h has the fields every endpoint ignores).
#include "server/endpoints/responses_request.h"

#include <chrono>
#include <cmath>
#include <regex>
#include <set>

#include "server/api/request_fields.h"
#include "server/endpoints/chat_request.h"
#include "server/endpoints/responses_output.h"
#include "server/endpoints/responses_store.h"

namespace flashserve {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using request::only_keys;

namespace {

// flashserve's own chat fields (docs/SERVER.md), passed to the chat request as they are.
const std::set<std::string>& passthrough_fields() {
  static const std::set<std::string> k = {
      "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed",
      "stop", "ignore_eos", "logit_bias", "cache_salt", "speculative", "chat_template_kwargs"};
  return k;
}

const std::set<std::string>& known_fields() {
  static const std::set<std::string> k = [] {
    std::set<std::string> s = {
        // Translated into the chat request or echoed.
        "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "text",
        "tools", "tool_choice", "parallel_tool_calls", "reasoning", "stream", "stream_options",
        "previous_response_id", "store", "metadata", "user",
        // Accepted with the values that change nothing, refused with others (reject_unsupported).
        "background", "truncation", "include", "top_logprobs", "max_tool_calls", "conversation",
        "prompt"};
    s.insert(passthrough_fields().begin(), passthrough_fields().end());
    return s;
  }();
  return k;
}

[[noreturn]] void unsupported(const std::string& param, const std::string& why) {
  throw bad_request("'" + param + "' " + why, param, "unsupported_parameter");
}

// Fields whose every value but the default would change the output in ways this server cannot.
void reject_unsupported(const ojson& b) {
  if (request::has(b, "background") && b["background"] != false) {
    unsupported("background", "is not supported (responses are generated while the request "
                              "waits); send false or leave it out");
  }
  if (request::has(b, "truncation") && b["truncation"] != "disabled") {
    unsupported("truncation", "must be 'disabled': an input that does not fit the context is "
                              "a 400, never cut");
  }
  if (request::has(b, "include")) {
    if (!b["include"].is_array()) throw bad_request("'include' must be a list", "include");
    for (const ojson& v : b["include"]) {
      // Encrypted reasoning is for stateless multi-turn; this server never writes any.
      if (v != "reasoning.encrypted_content") {
        unsupported("include", "value " + v.dump() + " is not supported (only "
                               "\"reasoning.encrypted_content\", which adds nothing here)");
      }
    }
  }
  if (request::has(b, "top_logprobs") && b["top_logprobs"] != 0) {
    unsupported("top_logprobs", "is not supported by /v1/responses (use /v1/chat/completions)");
  }
  for (const char* key : {"max_tool_calls", "conversation", "prompt"}) {
    if (request::has(b, key)) unsupported(key, "is not supported by this server");
  }
}

// text: {format: {type: text | json_object | json_schema, ...}, verbosity} -> response_format.
void read_text(const ojson& text, ojson* chat) {
  only_keys(text, "text", {"format", "verbosity"});
  if (request::has(text, "verbosity") && text["verbosity"] != "medium") {
    unsupported("text.verbosity", "is not supported (the model writes as it writes)");
  }
  if (!request::has(text, "format")) return;
  const ojson& f = text["format"];
  if (!f.is_object() || !request::has(f, "type") || !f["type"].is_string()) {
    throw bad_request("'text.format' must be an object with a 'type'", "text.format");
  }
  const std::string type = f["type"].get<std::string>();
  if (type == "json_schema") {  // flattened in Responses, nested in chat
    ojson schema = f;
    schema.erase("type");
    (*chat)["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  } else if (type == "text" || type == "json_object") {
    (*chat)["response_format"] = f;
  } else {
    throw bad_request("'text.format.type' must be 'text', 'json_object' or 'json_schema', got '" +
                          type + "'", "text.format.type");
  }
}

// Function tools, flattened ({type, name, description, parameters, strict}) -> the chat form.
void read_tools(const ojson& b, ojson* chat) {
  if (request::has(b, "tools")) {
    if (!b["tools"].is_array()) throw bad_request("'tools' must be a list of tools", "tools");
    ojson tools = ojson::array();
    for (size_t i = 0; i < b["tools"].size(); ++i) {
      const std::string w = "tools[" + std::to_string(i) + "]";
      const ojson& t = b["tools"][i];
      if (!t.is_object() || !request::has(t, "type") || !t["type"].is_string()) {
        throw bad_request("'" + w + "' must be an object with a 'type'", w);
      }
      if (t["type"] != "function") {
        throw bad_request("'" + w + "' has type '" + t["type"].get<std::string>() +
                              "': only function tools are supported (no built-in tools such as "
                              "web_search, file_search or computer_use)",
                          w, "unsupported_tool_type");
      }
      ojson function = t;
      function.erase("type");
      tools.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    (*chat)["tools"] = std::move(tools);
  }
  if (request::has(b, "tool_choice")) {
    const ojson& c = b["tool_choice"];
    if (c.is_object()) {
      if (c.value("type", "") != "function") {
        unsupported("tool_choice", "must be 'none', 'auto', 'required' or {\"type\": "
                                   "\"function\", \"name\": ...} (only function tools exist here)");
      }
      only_keys(c, "tool_choice", {"type", "name"});
      (*chat)["tool_choice"] = {{"type", "function"},
                                {"function", {{"name", c.value("name", ojson())}}}};
    } else {
      (*chat)["tool_choice"] = c;
    }
  }
  if (b.contains("parallel_tool_calls")) (*chat)["parallel_tool_calls"] = b["parallel_tool_calls"];
}

// A sampling default as the response echoes it (the float rounded back to what was written).
json echo_number(const ojson& b, const char* key, float fallback) {
  if (request::has(b, key)) return json(b[key]);
  return std::round(double(fallback) * 1e6) / 1e6;
}

json request_fields(const ojson& b, const ServedModel& model, bool store) {
  auto or_default = [&](const char* key, json fallback) {
    return request::has(b, key) ? json(b[key]) : std::move(fallback);
  };
  json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
  if (request::has(b, "reasoning")) reasoning.update(json(b["reasoning"]));
  return json{{"instructions", or_default("instructions", nullptr)},
              {"max_output_tokens", or_default("max_output_tokens", nullptr)},
              {"temperature", echo_number(b, "temperature", model.sampling_defaults.temperature)},
              {"top_p", echo_number(b, "top_p", model.sampling_defaults.top_p)},
              {"tools", or_default("tools", json::array())},
              {"tool_choice", or_default("tool_choice", "auto")},
              {"text", or_default("text", {{"format", {{"type", "text"}}}})},
              {"parallel_tool_calls", or_default("parallel_tool_calls", true)},
              {"previous_response_id", or_default("previous_response_id", nullptr)},
              {"reasoning", reasoning},
              {"metadata", or_default("metadata", json::object())},
              {"user", or_default("user", nullptr)},
              {"truncation", "disabled"},
              {"store", store}};
}

// A chat error in the names the Responses request used.
ApiError in_responses_terms(ApiError e) {
  // A quoted name in the message; the whole of `param`.
  const std::regex messages(R"('messages(\[\d+\](\.\w+(\[\d+\])?)*)?')");
  e.message = std::regex_replace(e.message, messages, "'input'");
  if (e.param.rfind("messages", 0) == 0) e.param = "input";
  static const std::pair<std::regex, std::string> kRenames[] = {
      {std::regex(R"(\bresponse_format(\.json_schema)?)"), "text.format"},
      {std::regex(R"(\bmax_completion_tokens\b)"), "max_output_tokens"},
      {std::regex(R"(\breasoning_effort\b)"), "reasoning.effort"},
      {std::regex(R"((tools\[\d+\]|tool_choice)\.function\b)"), "$1"},
  };
  for (const auto& [pattern, name] : kRenames) {
    e.message = std::regex_replace(e.message, pattern, name);
    e.param = std::regex_replace(e.param, pattern, name);
  }
  if (e.param == "max_tokens") e.param = "max_output_tokens";
  return e;
}

ResponsesRequest parse(std::string_view body, const ServedModel& model,
                       const Tokenizer& tokenizer, ResponsesStore& store) {
  const json j = request::parse_object(body);
  request::check_fields_and_model(j, model, known_fields());
  const ojson b = ojson::parse(body);
  ojson history = ojson::array();
  if (request::has(b, "previous_response_id")) {
    if (!b["previous_response_id"].is_string()) {
      throw bad_request("'previous_response_id' must be a string", "previous_response_id");
    }
    const std::string id = b["previous_response_id"].get<std::string>();
    std::optional<StoredResponse> prev = store.get(id);
    if (!prev) {
      ApiError e = response_not_found(id);
      e.status = 400;
      e.param = "previous_response_id";
      e.code = "previous_response_not_found";
      throw e;
    }
    for (const json& item : prev->input_items) history.push_back(ojson(item));
    for (const json& item : prev->response["output"]) history.push_back(ojson(item));
  }
  ChatTranslation t = responses_to_chat(b, history, model);
  auto parsed = parse_chat_request(dump_json(json(t.chat_body)), model, tokenizer);
  if (auto* e = std::get_if<ApiError>(&parsed)) throw in_responses_terms(*e);
  ResponsesRequest r;
  r.chat = std::move(std::get<CompletionRequest>(parsed));
  r.turn.id = random_id("resp_");
  r.turn.created_at = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  r.turn.model = model.id;
  r.turn.request_fields = std::move(t.request_fields);
  r.turn.input_items = std::move(t.input_items);
  r.turn.store = t.store;
  return r;
}

}  // namespace

ChatTranslation responses_to_chat(const ojson& b, const ojson& history, const ServedModel& model) {
  reject_unsupported(b);
  ChatTranslation t;
  ojson& chat = t.chat_body = ojson::object();
  ojson messages = ojson::array();
  if (request::has(b, "instructions")) {
    if (!b["instructions"].is_string()) {
      throw bad_request("'instructions' must be a string", "instructions");
    }
    messages.push_back({{"role", "system"}, {"content", b["instructions"]}});
  }
  append_input_messages(history, "previous_response_id", &messages);
  if (!request::has(b, "input")) throw bad_request("'input' is required", "input");
  ojson input = b["input"];
  if (input.is_string()) {
    input = ojson::array({{{"role", "user"}, {"content", b["input"]}}});
  } else if (!input.is_array()) {
    throw bad_request("'input' must be a string or a list of input items", "input");
  }
  append_input_messages(input, "input", &messages);
  t.input_items = json(history);
  for (const ojson& item : input) t.input_items.push_back(json(item));
  chat["messages"] = std::move(messages);

  if (request::has(b, "model")) chat["model"] = b["model"];
  for (const char* key : {"temperature", "top_p", "user"}) {
    if (b.contains(key)) chat[key] = b[key];
  }
  for (const std::string& key : passthrough_fields()) {
    if (b.contains(key)) chat[key] = b[key];
  }
  if (b.contains("max_output_tokens")) chat["max_completion_tokens"] = b["max_output_tokens"];
  if (request::has(b, "text")) read_text(b["text"], &chat);
  read_tools(b, &chat);
  if (request::has(b, "reasoning")) {
    only_keys(b["reasoning"], "reasoning", {"effort", "summary", "generate_summary"});
    if (b["reasoning"].contains("effort")) chat["reasoning_effort"] = b["reasoning"]["effort"];
  }
  if (b.contains("stream")) chat["stream"] = b["stream"];
  if (request::has(b, "stream") && b["stream"] == true) {
    chat["stream_options"] = {{"include_usage", true}};  // response.completed carries usage
  }
  if (request::has(b, "store")) {
    if (!b["store"].is_boolean()) throw bad_request("'store' must be a boolean", "store");
    t.store = b["store"].get<bool>();
  }
  if (request::has(b, "metadata") && !b["metadata"].is_object()) {
    throw bad_request("'metadata' must be an object", "metadata");
  }
  t.request_fields = request_fields(b, model, t.store);
  return t;
}

std::variant<ResponsesRequest, ApiError> parse_responses_request(std::string_view body,
                                                                 const ServedModel& model,
                                                                 const Tokenizer& tokenizer,
                                                                 ResponsesStore& store) {
  try {
    return parse(body, model, tokenizer, store);
  } catch (...) {
    return request::caught_error(std::current_exception());
  }
}

ApiError response_not_found(const std::string& id) {
  ApiError e = bad_request("Response with id '" + id + "' not found (responses are kept in "
                           "memory for a limited time; docs/SERVER.md)", "", "not_found");
  e.status = 404;
  return e;
}

}  // namespace flashserve
