// Tool calls in chat responses and stream chunks (see tool_call_output.h).
#include "server/tool_calls/tool_call_output.h"

namespace flashserve {

using json = nlohmann::json;

std::string tool_finish_reason(const std::string& reason, bool called) {
  return called && reason == "stop" ? "tool_calls" : reason;
}

json tool_call_message(output_parsers::ToolCallFormat format, const std::string& text,
                       bool parallel, uint64_t id_seed, std::string* finish_reason) {
  output_parsers::ParsedOutput parsed = output_parsers::parse_tool_calls(format, text, id_seed);
  if (!parallel && parsed.tool_calls.size() > 1) parsed.tool_calls.resize(1);
  json message = {{"role", "assistant"}, {"content", parsed.content}};
  if (parsed.tool_calls.empty()) return message;
  if (parsed.content.empty()) message["content"] = nullptr;
  json calls = json::array();
  for (const auto& c : parsed.tool_calls) {
    calls.push_back({{"id", c.id},
                     {"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  message["tool_calls"] = std::move(calls);
  *finish_reason = tool_finish_reason(*finish_reason, true);
  return message;
}

std::vector<json> ToolCallDeltas::shape(const std::vector<output_parsers::ToolCallEvent>& events) {
  std::vector<json> out;
  for (const auto& e : events) {
    if (e.index < 0) {
      if (!e.content.empty()) out.push_back({{"content", e.content}});
      continue;
    }
    if (!parallel_ && e.index > 0) continue;
    called_ = true;
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

}  // namespace flashserve
