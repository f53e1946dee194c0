// Tool calls in chat responses and stream chunks (see tool_call_output.h).
#include "server/tool_calls/tool_call_output.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

json assistant_message(std::string content, std::vector<output_parsers::ToolCall> calls,
                       bool parallel, std::string* finish_reason) {
  if (!parallel && calls.size() > 1) calls.resize(1);
  json message = {{"role", "assistant"}, {"content", content}};
  if (calls.empty()) return message;
  if (content.empty()) message["content"] = nullptr;
  json list = json::array();
  for (const auto& c : calls) {
    list.push_back({{"id", c.id},
                    {"type", "function"},
                    {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  message["tool_calls"] = std::move(list);
  *finish_reason = tool_finish_reason(*finish_reason, true);
  return message;
}

// Stream events as chunk deltas; *called is set once a call's piece goes out.
std::vector<json> event_deltas(const std::vector<output_parsers::ToolCallEvent>& events,
                               bool parallel, bool* called) {
  std::vector<json> out;
  for (const auto& e : events) {
    if (e.index < 0) {
      if (!e.content.empty()) out.push_back({{"content", e.content}});
      continue;
    }
    if (!parallel && e.index > 0) continue;
    *called = true;
    json call = {{"index", e.index}};
    if (!e.id.empty()) {
      call["id"] = e.id;
      call["type"] = "function";
      call["function"] = {{"name", e.name}, {"arguments", e.arguments}};
    } else {
      if (e.arguments.empty()) continue;
      call["function"] = {{"arguments", e.arguments}};
    }
    out.push_back({{"tool_calls", json::array({std::move(call)})}});
  }
  return out;
}

}  // namespace

std::string tool_finish_reason(const std::string& reason, bool called) {
  return called && reason == "stop" ? "tool_calls" : reason;
}

json tool_call_message(output_parsers::ToolCallFormat format, const std::string& text,
                       bool parallel, uint64_t id_seed, std::string* finish_reason) {
  output_parsers::ParsedOutput parsed = output_parsers::parse_tool_calls(format, text, id_seed);
  return assistant_message(std::move(parsed.content), std::move(parsed.tool_calls), parallel,
                           finish_reason);
}

std::vector<json> ToolCallDeltas::shape(const std::vector<output_parsers::ToolCallEvent>& events) {
  return event_deltas(events, parallel_, &called_);
}

json harmony_message(const std::string& text, const std::vector<std::string>& functions,
                     bool parallel, uint64_t id_seed, std::string* finish_reason) {
  output_parsers::HarmonyOutput parsed = output_parsers::parse_harmony(text, functions, id_seed);
  json message = assistant_message(std::move(parsed.content), std::move(parsed.tool_calls),
                                   parallel, finish_reason);
  message["reasoning_content"] =
      parsed.reasoning_content.empty() ? json(nullptr) : json(parsed.reasoning_content);
  return message;
}

std::vector<json> HarmonyDeltas::shape(const output_parsers::HarmonyDelta& delta) {
  std::vector<json> out;
  if (!delta.reasoning_content.empty()) out.push_back({{"reasoning_content", delta.reasoning_content}});
  for (json& d : event_deltas(delta.events, parallel_, &called_)) out.push_back(std::move(d));
  return out;
}

}  // namespace flashserve
