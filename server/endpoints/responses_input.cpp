// /v1/responses input items as chat messages (see responses_request.h): message items with text
// parts, function_call items (an assistant turn's tool_calls; consecutive calls join one turn)
// and function_call_output items (tool messages). A reasoning item's text becomes the next
// assistant turn's reasoning_content, which the chat template keeps or drops (gpt-oss keeps it
// before a call). Any other item or part type is a 400.
#include <string>

#include "server/api/request_fields.h"
#include "server/endpoints/responses_request.h"

namespace flashserve {

using ojson = nlohmann::ordered_json;

using request::only_keys;

namespace {

std::string string_field(const ojson& o, const char* key, const std::string& where) {
  if (!request::has(o, key) || !o[key].is_string()) {
    throw bad_request("'" + where + "." + key + "' is required (a string)", where + "." + key);
  }
  return o[key].get<std::string>();
}

// A string, or a list of text parts (input_text / output_text) joined.
std::string text_content(const ojson& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    throw bad_request("'" + where + "' must be a string or a list of content parts", where);
  }
  std::string text;
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string part = where + "[" + std::to_string(k) + "]";
    const ojson& p = c[k];
    if (!p.is_object() || !request::has(p, "type") || !p["type"].is_string()) {
      throw bad_request("'" + part + "' must be an object with a 'type'", part);
    }
    const std::string type = p["type"].get<std::string>();
    if (type != "input_text" && type != "output_text") {
      throw bad_request("'" + part + "' has type '" + type + "': only text parts (input_text, "
                        "output_text) are supported (no images, files or audio)",
                        part, "unsupported_content_type");
    }
    only_keys(p, part, {"type", "text", "annotations", "logprobs"});
    text += string_field(p, "text", part);
  }
  return text;
}

ojson message(const ojson& item, const std::string& where) {
  only_keys(item, where, {"type", "role", "content", "id", "status", "phase"});
  const std::string role = string_field(item, "role", where);
  if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
    throw bad_request("'" + where + ".role' is '" + role +
                          "': roles are user, system, developer and assistant",
                      where + ".role");
  }
  if (!request::has(item, "content")) {
    throw bad_request("'" + where + ".content' is required", where + ".content");
  }
  return ojson{{"role", role}, {"content", text_content(item["content"], where + ".content")}};
}

// A reasoning item's text: its reasoning_text parts (this server writes those), joined.
std::string reasoning_text(const ojson& item) {
  std::string text;
  if (!item.contains("content") || !item["content"].is_array()) return text;
  for (const ojson& p : item["content"]) {
    if (p.is_object() && p.contains("text") && p["text"].is_string()) text += p["text"].get<std::string>();
  }
  return text;
}

// Whether the last message is an assistant turn holding only reasoning so far.
bool open_reasoning_turn(const ojson& messages) {
  if (messages.empty()) return false;
  const ojson& m = messages.back();
  return m["role"] == "assistant" && m.contains("reasoning_content") && !m.contains("content") &&
         !m.contains("tool_calls");
}

// A function_call item joins the assistant turn just before it, or starts one of its own.
void function_call(const ojson& item, const std::string& where, ojson* messages) {
  only_keys(item, where, {"type", "id", "call_id", "name", "arguments", "status"});
  const std::string arguments = string_field(item, "arguments", where);
  if (ojson::parse(arguments, nullptr, false).is_discarded()) {
    throw bad_request("'" + where + ".arguments' must be JSON text", where + ".arguments");
  }
  ojson call = {{"id", string_field(item, "call_id", where)},
                {"type", "function"},
                {"function", {{"name", string_field(item, "name", where)},
                              {"arguments", arguments}}}};
  if (messages->empty() || messages->back()["role"] != "assistant") {
    messages->push_back({{"role", "assistant"}});
  }
  ojson& turn = messages->back();
  if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
  turn["tool_calls"].push_back(std::move(call));
}

ojson function_call_output(const ojson& item, const std::string& where) {
  only_keys(item, where, {"type", "id", "call_id", "output", "status"});
  if (!request::has(item, "output")) {
    throw bad_request("'" + where + ".output' is required", where + ".output");
  }
  return ojson{{"role", "tool"},
               {"tool_call_id", string_field(item, "call_id", where)},
               {"content", text_content(item["output"], where + ".output")}};
}

}  // namespace

void append_input_messages(const ojson& items, const std::string& where, ojson* messages) {
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string w = where + "[" + std::to_string(i) + "]";
    const ojson& item = items[i];
    if (!item.is_object()) throw bad_request("'" + w + "' must be an object", w);
    std::string type = "message";  // a bare {role, content} is a message
    if (request::has(item, "type")) {
      if (!item["type"].is_string()) {
        throw bad_request("'" + w + ".type' must be a string", w + ".type");
      }
      type = item["type"].get<std::string>();
    } else if (!request::has(item, "role")) {
      throw bad_request("'" + w + "' needs a 'type' (or a 'role', for a message)", w + ".type");
    }
    if (type == "message") {
      ojson m = message(item, w);
      if (m["role"] == "assistant" && open_reasoning_turn(*messages)) {
        messages->back()["content"] = std::move(m["content"]);
      } else {
        messages->push_back(std::move(m));
      }
    } else if (type == "reasoning") {
      const std::string text = reasoning_text(item);
      if (!text.empty()) messages->push_back({{"role", "assistant"}, {"reasoning_content", text}});
    } else if (type == "function_call") {
      function_call(item, w, messages);
    } else if (type == "function_call_output") {
      messages->push_back(function_call_output(item, w));
    } else {
      throw bad_request("'" + w + "' has type '" + type + "', which this server does not "
                        "support: input items may be message, function_call, "
                        "function_call_output and reasoning",
                        w, "unsupported_item_type");
    }
  }
}

}  // namespace flashserve
