// gpt-oss writes its output in OpenAI's harmony format: a run of messages, each a header naming
// its channel (and, for a tool call, its recipient), then <|message|>, the body, and <|end|>,
// <|call|> or <|return|>. This splits that output into the parts of an OpenAI message: the
// analysis channel is reasoning_content, a message to=functions.NAME (NAME offered in the
// request's tools) is a tool call whose body is the arguments, final and commentary messages are
// content. Whole or streamed. Rules for broken output: docs/TOOL_CALLING.md#harmony.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "output_parsers/call_id.h"
#include "output_parsers/tool_call_parser.h"

namespace flashserve::output_parsers {

// Whether a chat template writes the harmony format (it opens channels).
bool template_is_harmony(std::string_view chat_template);

// The header of one message: the text from its start (<|start|>, or the output's first byte,
// whose role the prompt already wrote) up to <|message|>.
struct HarmonyHeader {
  enum class Status {
    kComplete,  // a whole header (the text was followed by <|message|>)
    kPartial,   // a valid beginning of one; more text may finish it
    kInvalid,   // no header: the format is broken here
  } status;
  std::string channel{}, recipient{};  // when complete ("" = none given)
};

// `complete`: <|message|> follows the text. `first`: the output's first message, which may lack
// "<|start|>assistant". Headers over kMaxHarmonyHeaderBytes are invalid, so that a stream of
// broken output is never held back for long.
HarmonyHeader parse_harmony_header(std::string_view text, bool complete, bool first);
inline constexpr size_t kMaxHarmonyHeaderBytes = 256;

struct HarmonyOutput {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
};

// What one streamed piece adds: reasoning text, and content / tool-call pieces (ToolCallEvent:
// index -1 is content; a call's first piece alone carries its id and name).
struct HarmonyDelta {
  std::string reasoning_content;
  std::vector<ToolCallEvent> events;
};

// Fed the output's text deltas in order (special-token markers included as their text). Text
// that may still be a header or a marker is held back; a header or end marker cut off by the end
// of the output is dropped, never content. Joining the deltas gives parse_harmony's answer for
// the whole text, however it was split.
class HarmonyStream {
 public:
  // functions: the names of the request's tools; a message to any other recipient is content.
  HarmonyStream(std::vector<std::string> functions, uint64_t id_seed);
  HarmonyDelta push(std::string_view delta);
  HarmonyDelta finish();
  int num_calls() const { return calls_; }

 private:
  enum class State { kHeader, kBody, kText };  // kText: broken output, content up to <|start|>
  enum class Part { kReasoning, kContent, kCall };
  HarmonyDelta advance(bool final);
  void open_message(const HarmonyHeader& h, HarmonyDelta& out);
  void emit(std::string_view text, HarmonyDelta& out);

  std::vector<std::string> functions_;
  CallIdGenerator ids_;
  std::string pending_;       // text not yet given to a part
  State state_ = State::kHeader;
  bool first_ = true;         // the next header is the output's first
  Part part_ = Part::kContent;  // the open message's part
  bool message_has_text_ = false;
  bool part_has_text_[2] = {false, false};  // reasoning, content: joined with "\n" between messages
  int calls_ = 0;             // calls opened so far (the open one included)
  bool finished_ = false;
};

// The whole output at once. Call ids come from CallIdGenerator(id_seed), in call order.
HarmonyOutput parse_harmony(std::string_view text, std::vector<std::string> functions,
                            uint64_t id_seed);

}  // namespace flashserve::output_parsers
