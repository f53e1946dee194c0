// split_reasoning reads the whole output directly; ReasoningStream walks the same three states
// (before the output's first tag, inside the reasoning, in the answer) over text deltas.
#include "output_parsers/reasoning_parser.h"

#include "core/error.h"
#include "output_parsers/partial_marker.h"

namespace flashserve::output_parsers {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

}  // namespace

bool prompt_opens_reasoning(std::string_view prompt) {
  const size_t open = prompt.rfind(kOpen);
  return open != std::string_view::npos && trim_space(prompt.substr(open + kOpen.size())).empty();
}

bool template_has_reasoning(std::string_view chat_template) {
  return chat_template.find(kOpen) != std::string_view::npos ||
         chat_template.find(kClose) != std::string_view::npos;
}

ReasoningOutput split_reasoning(std::string_view text, bool starts_in_reasoning) {
  const std::string_view rest = text.substr(skip_json_space(text, 0));
  std::string_view body;
  if (rest.starts_with(kOpen)) {
    body = rest.substr(kOpen.size());
  } else if (starts_in_reasoning) {
    body = rest;
  } else {
    return {.content = std::string(trim_space(text))};
  }
  const size_t close = body.find(kClose);
  if (close == std::string_view::npos) return {.reasoning_content = std::string(trim_space(body))};
  return {.reasoning_content = std::string(trim_space(body.substr(0, close))),
          .content = std::string(trim_space(body.substr(close + kClose.size())))};
}

ReasoningOutput ReasoningStream::push(std::string_view delta) {
  FS_CHECK(!finished_, "ReasoningStream::push after finish");
  pending_ += delta;
  return advance(/*final=*/false);
}

ReasoningOutput ReasoningStream::finish() {
  if (finished_) return {};
  finished_ = true;
  return advance(/*final=*/true);
}

ReasoningOutput ReasoningStream::advance(bool final) {
  ReasoningOutput out;
  while (true) {
    if (state_ == State::kStart) {
      const size_t i = skip_json_space(pending_, 0);
      const std::string_view rest = std::string_view(pending_).substr(i);
      if (rest.starts_with(kOpen)) {
        pending_.erase(0, i + kOpen.size());
        state_ = State::kReasoning;
      } else if (!final && kOpen.starts_with(rest)) {
        return out;  // "<thi" may still become the tag
      } else {
        state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
      }
    } else if (state_ == State::kReasoning) {
      const size_t close = pending_.find(kClose);
      if (close == std::string::npos) {
        const size_t keep = final ? pending_.size() : partial_marker_start(pending_, 0, kClose);
        out.reasoning_content += reasoning_trim_.push(std::string_view(pending_).substr(0, keep));
        pending_.erase(0, keep);
        return out;
      }
      out.reasoning_content += reasoning_trim_.push(std::string_view(pending_).substr(0, close));
      pending_.erase(0, close + kClose.size());
      state_ = State::kContent;
    } else {
      out.content += content_trim_.push(pending_);
      pending_.clear();
      return out;
    }
  }
}

}  // namespace flashserve::output_parsers
