// Tools for a chat template that does not read `tools`: the conversation is rewritten so that
// the model still sees them, in the Hermes style (docs/TOOL_CALLING.md): a system block lists
// the functions and asks for <tool_call>{"name", "arguments"}</tool_call>; an assistant's past
// calls become that text and tool results become user turns in <tool_response> tags.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "chat_template/chat_template.h"

namespace flashserve {

// `tools`: [{"type": "function", "function": {...}}]. Empty tools: only the messages' tool
// fields are rewritten (a conversation may carry past calls after the tools are gone).
std::vector<ChatMessage> describe_tools_in_messages(std::vector<ChatMessage> messages,
                                                    const nlohmann::ordered_json& tools);

}  // namespace flashserve
