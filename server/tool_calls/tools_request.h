// Tool calling at the API edge: `tools`, `tool_choice` and `parallel_tool_calls`, and the tool
// fields of messages (role "tool" with tool_call_id; assistant tool_calls). Every check that can
// fail is here, in one pass, as a 400 naming the parameter: a tool whose parameters the grammar
// compiler refuses, a tool_choice naming an unknown function, a tool message without its id.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"

namespace flashserve::request {

struct ToolsRequest {
  enum class Choice { kNone, kAuto, kRequired, kNamed };
  // As transformers passes them to a template: [{"type": "function", "function": {"name",
  // "description", "parameters"}}], key order as sent; empty: no tools.
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  Choice choice = Choice::kAuto;
  std::string named;     // kNamed: the function
  bool parallel = true;  // parallel_tool_calls
  bool any() const { return !tools.empty(); }
  // The function's parameters schema (JSON text); {"type":"object"} when it declares none.
  std::string parameters(const std::string& name) const;
};

// Reads tools, tool_choice and parallel_tool_calls; `body` is re-read with its key order kept.
ToolsRequest read_tools(const nlohmann::json& j, std::string_view body, const ServedModel& model);

// A message's tool fields: role "tool" needs tool_call_id; an assistant's tool_calls are
// [{"id", "type": "function", "function": {"name", "arguments": JSON text}}].
void read_message_tool_fields(const nlohmann::json& m, const std::string& where, ChatMessage* msg);

}  // namespace flashserve::request
