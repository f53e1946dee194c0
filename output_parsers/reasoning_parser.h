// Reasoning models (DeepSeek-R1, Qwen 3) think in <think>...</think> before they answer: this splits
// their output into reasoning_content and content, whole or streamed. When the chat template
// already opened <think> in the prompt, the output starts inside the reasoning and only </think>
// appears. Both parts lose the whitespace at their edges. docs/TOOL_CALLING.md#reasoning.
#pragma once

#include <string>
#include <string_view>

#include "output_parsers/edge_trim.h"

namespace flashserve::output_parsers {

// Whether a rendered prompt leaves the model inside <think>: its last tag (whitespace aside) is an
// opening <think>, as DeepSeek-R1's template writes. Qwen 3 with thinking off ends with
// "<think>\n\n</think>\n\n" and is not.
bool prompt_opens_reasoning(std::string_view prompt);
// Whether a chat template speaks of <think> at all: the reasoning parser's automatic choice.
bool template_has_reasoning(std::string_view chat_template);

struct ReasoningOutput {
  std::string reasoning_content{};
  std::string content{};
};

// The whole output. starts_in_reasoning: prompt_opens_reasoning(prompt). Without it, reasoning is
// recognised only when the output begins with <think> (whitespace aside); a <think> with no
// </think> (output cut short) is all reasoning. After </think>, everything is content.
ReasoningOutput split_reasoning(std::string_view text, bool starts_in_reasoning);

// The same split, fed text deltas. Each push returns what can be sent now (either part may be
// empty); text that may be a tag is held back. The pieces join to split_reasoning's answer.
class ReasoningStream {
 public:
  explicit ReasoningStream(bool starts_in_reasoning) : starts_in_reasoning_(starts_in_reasoning) {}
  ReasoningOutput push(std::string_view delta);
  ReasoningOutput finish();

 private:
  enum class State { kStart, kReasoning, kContent };
  ReasoningOutput advance(bool final);

  bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string pending_;  // text not yet assigned to a part
  EdgeTrim reasoning_trim_, content_trim_;
  bool finished_ = false;
};

}  // namespace flashserve::output_parsers
