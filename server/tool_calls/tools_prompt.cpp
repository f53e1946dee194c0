// The Hermes-style tools block for templates without tool support (see tools_prompt.h).
#include "server/tool_calls/tools_prompt.h"

namespace flashserve {

namespace {

std::string tools_block(const nlohmann::ordered_json& tools) {
  // Short: small models have small contexts.
  std::string s = "# Tools\n\nFunctions you may call, one JSON signature a line:\n<tools>\n";
  for (const auto& t : tools) s += t.dump() + "\n";
  s += "</tools>\nTo call one, write:\n<tool_call>\n{\"name\": <name>, \"arguments\": "
       "<JSON object>}\n</tool_call>";
  return s;
}

std::string call_text(const ChatToolCall& c) {
  nlohmann::ordered_json body = {{"name", c.name}};
  body["arguments"] = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
  if (body["arguments"].is_discarded()) body["arguments"] = c.arguments;
  return "<tool_call>\n" + body.dump() + "\n</tool_call>";
}

}  // namespace

std::vector<ChatMessage> describe_tools_in_messages(std::vector<ChatMessage> messages,
                                                    const nlohmann::ordered_json& tools) {
  for (ChatMessage& m : messages) {
    if (m.role == "tool") {
      m.role = "user";
      m.content = "<tool_response>\n" + m.content + "\n</tool_response>";
      m.tool_call_id.clear();
    }
    for (const ChatToolCall& c : m.tool_calls) {
      m.content += (m.content.empty() ? "" : "\n") + call_text(c);
    }
    m.tool_calls.clear();
    m.null_content = false;
  }
  if (tools.empty()) return messages;
  if (!messages.empty() && messages[0].role == "system") {
    messages[0].content += "\n\n" + tools_block(tools);
  } else {
    ChatMessage system;
    system.role = "system";
    system.content = tools_block(tools);
    messages.insert(messages.begin(), std::move(system));
  }
  return messages;
}

}  // namespace flashserve
