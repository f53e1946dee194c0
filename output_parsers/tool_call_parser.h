// output_parsers/ turns a model's raw output text into the structured parts of an OpenAI message:
// tool calls (this header) and reasoning (reasoning_parser.h), whole or streamed.
// Tool calls: the Hermes/Qwen, Llama 3 JSON and Mistral formats, the choice of format from a chat
// template, and a stream that turns text deltas into OpenAI delta.tool_calls pieces. Formats,
// whitespace and the malformed-call policy: docs/TOOL_CALLING.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "output_parsers/call_id.h"
#include "output_parsers/edge_trim.h"

namespace flashserve::output_parsers {

enum class ToolCallFormat {
  kNone,        // no parsing: all output is content, verbatim
  kHermes,      // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes, Qwen 2.5, Qwen 3)
  kLlama3Json,  // {"name": ..., "parameters": {...}} at the start or after <|python_tag|> (Llama 3.1+)
  kMistral,     // [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or [TOOL_CALLS]name[ARGS]{...}
  kHarmony,     // gpt-oss: <|channel|>commentary to=functions.NAME ...<|message|>{...}<|call|>; also
                // carries reasoning, so it has a parser of its own (harmony_parser.h), not this one
};

// The --tool-call-parser names: "hermes", "llama3_json", "mistral", "harmony", "none"; "auto" and "" detect
// from the chat template. Throws flashserve::Error naming the flag for any other name.
ToolCallFormat choose_tool_call_format(std::string_view name, std::string_view chat_template);
// The format a chat template's text asks for (markers it contains), kNone when it has none.
ToolCallFormat detect_tool_call_format(std::string_view chat_template);
std::string_view tool_call_format_name(ToolCallFormat format);

struct ToolCall {
  std::string id;         // "call_" + 24 letters and digits
  std::string name;
  std::string arguments;  // the JSON text the model wrote (valid unless the output was cut short
                          // or broke inside the arguments: docs/TOOL_CALLING.md)
};

struct ParsedOutput {
  std::string content;  // the text around the calls, trimmed of whitespace at both ends
  std::vector<ToolCall> tool_calls;
};

// The whole output at once. Call ids come from CallIdGenerator(id_seed), in call order. Not for
// kHarmony (HarmonyStream parses that).
ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, uint64_t id_seed);

// One streamed piece, in the shape of OpenAI's chat.completion.chunk delta: content text
// (index == -1), or a piece of tool call `index`, whose first piece alone carries id and name.
struct ToolCallEvent {
  int index = -1;
  std::string content;    // index == -1
  std::string id, name;   // first piece of a call
  std::string arguments;  // a fragment of the call's arguments (may be empty on the first piece)
};

// Fed the output's text deltas in order; text that may begin a call is held back until it is
// decided. Joining every event's content, and each index's arguments, gives exactly
// parse_tool_calls(format, whole text, id_seed), however the text was split.
class ToolCallStream {
 public:
  ToolCallStream(ToolCallFormat format, uint64_t id_seed);
  std::vector<ToolCallEvent> push(std::string_view delta);
  std::vector<ToolCallEvent> finish();  // end of output: releases or settles what was held
  int num_calls() const { return calls_closed_ + static_cast<int>(open_args_sent_.size()); }

 private:
  std::vector<ToolCallEvent> advance(bool final);

  ToolCallFormat format_;
  CallIdGenerator ids_;
  std::string pending_;           // the text after the last settled point
  bool at_output_start_ = true;
  EdgeTrim content_trim_;
  size_t open_content_sent_ = 0;  // raw content bytes of pending_'s scan already sent
  std::vector<size_t> open_args_sent_;  // per call of pending_'s scan: argument bytes sent
  int calls_closed_ = 0;          // calls settled before pending_
  bool finished_ = false;
};

}  // namespace flashserve::output_parsers
