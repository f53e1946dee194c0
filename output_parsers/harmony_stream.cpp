// HarmonyStream walks the output in three states: reading a header (held until <|message|>
// settles it), inside a message's body (sent as it comes, up to an end marker), and broken text
// (sent as content up to the next <|start|>). parse_harmony is the stream fed the whole text.
#include <algorithm>
#include <array>

#include "core/error.h"
#include "output_parsers/harmony_parser.h"
#include "output_parsers/partial_marker.h"

namespace flashserve::output_parsers {
namespace {

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kMessage = "<|message|>";
// What ends a body: the message's end, a call, the end of the answer, or (the end marker
// missing) the next message's start, which stays to begin that message.
constexpr std::array<std::string_view, 4> kBodyEnds = {"<|end|>", "<|call|>", "<|return|>", kStart};

void add_content(std::vector<ToolCallEvent>& events, std::string text) {
  if (!events.empty() && events.back().index < 0) {
    events.back().content += text;
    return;
  }
  ToolCallEvent e;
  e.content = std::move(text);
  events.push_back(std::move(e));
}

}  // namespace

HarmonyStream::HarmonyStream(std::vector<std::string> functions, uint64_t id_seed)
    : functions_(std::move(functions)), ids_(id_seed) {}

HarmonyDelta HarmonyStream::push(std::string_view delta) {
  FS_CHECK(!finished_, "HarmonyStream::push after finish");
  pending_ += delta;
  return advance(/*final=*/false);
}

HarmonyDelta HarmonyStream::finish() {
  if (finished_) return {};
  finished_ = true;
  return advance(/*final=*/true);
}

void HarmonyStream::open_message(const HarmonyHeader& h, HarmonyDelta& out) {
  message_has_text_ = false;
  part_ = h.channel == "analysis" ? Part::kReasoning : Part::kContent;
  if (h.recipient.empty()) return;
  // A message to anyone but an offered function (a built-in tool, an unknown name) is content.
  part_ = Part::kContent;
  constexpr std::string_view kFunctions = "functions.";
  if (!std::string_view(h.recipient).starts_with(kFunctions)) return;
  const std::string name = h.recipient.substr(kFunctions.size());
  if (std::find(functions_.begin(), functions_.end(), name) == functions_.end()) return;
  part_ = Part::kCall;
  ToolCallEvent e;
  e.index = calls_++;
  e.id = ids_.next();
  e.name = name;
  out.events.push_back(std::move(e));
}

void HarmonyStream::emit(std::string_view text, HarmonyDelta& out) {
  if (text.empty()) return;
  if (part_ == Part::kCall) {
    ToolCallEvent e;
    e.index = calls_ - 1;
    e.arguments = std::string(text);
    out.events.push_back(std::move(e));
    return;
  }
  const int p = part_ == Part::kReasoning ? 0 : 1;
  std::string s = !message_has_text_ && part_has_text_[p] ? "\n" : "";
  s += text;
  message_has_text_ = part_has_text_[p] = true;
  if (part_ == Part::kReasoning) {
    out.reasoning_content += s;
  } else {
    add_content(out.events, std::move(s));
  }
}

HarmonyDelta HarmonyStream::advance(bool final) {
  HarmonyDelta out;
  while (true) {
    if (state_ == State::kHeader) {
      if (pending_.empty()) return out;
      // The header is the text before <|message|>; until that comes, the text before a tail
      // that may begin it (so that a header's size is counted alike however the text arrives).
      const size_t m = pending_.find(kMessage);
      const bool complete = m != std::string::npos;
      const size_t header_end = complete ? m : partial_marker_start(pending_, 0, kMessage);
      const HarmonyHeader h =
          parse_harmony_header(std::string_view(pending_).substr(0, header_end), complete, first_);
      if (h.status == HarmonyHeader::Status::kComplete) {
        open_message(h, out);
        pending_.erase(0, m + kMessage.size());
        state_ = State::kBody;
        first_ = false;
        continue;
      }
      if (h.status == HarmonyHeader::Status::kPartial) {
        if (final) pending_.clear();  // a header cut off by the end of the output is dropped
        return out;
      }
      // Broken: the text is content up to the next message start (a <|start|> it begins with
      // is part of that content, or the scan would stop there at once).
      state_ = State::kText;
      part_ = Part::kContent;
      message_has_text_ = false;
      if (std::string_view(pending_).starts_with(kStart)) {
        emit(kStart, out);
        pending_.erase(0, kStart.size());
      }
      continue;
    }
    if (state_ == State::kBody) {
      size_t end = std::string::npos, len = 0;
      for (std::string_view marker : kBodyEnds) {
        const size_t at = pending_.find(marker);
        if (at < end) {
          end = at;
          len = marker == kStart ? 0 : marker.size();
        }
      }
      if (end != std::string::npos) {
        emit(std::string_view(pending_).substr(0, end), out);
        pending_.erase(0, end + len);
        state_ = State::kHeader;
        continue;
      }
      // The body so far, less a tail that may begin an end marker (dropped at the end: a marker
      // cut off by max_tokens is not text).
      size_t keep = pending_.size();
      for (std::string_view marker : kBodyEnds) {
        keep = std::min(keep, partial_marker_start(pending_, 0, marker));
      }
      emit(std::string_view(pending_).substr(0, keep), out);
      pending_.erase(0, keep);
      if (final) pending_.clear();
      return out;
    }
    const size_t start = pending_.find(kStart);
    if (start != std::string::npos) {
      emit(std::string_view(pending_).substr(0, start), out);
      pending_.erase(0, start);
      state_ = State::kHeader;
      first_ = false;
      continue;
    }
    const size_t keep = final ? pending_.size() : partial_marker_start(pending_, 0, kStart);
    emit(std::string_view(pending_).substr(0, keep), out);
    pending_.erase(0, keep);
    return out;
  }
}

HarmonyOutput parse_harmony(std::string_view text, std::vector<std::string> functions,
                            uint64_t id_seed) {
  HarmonyStream stream(std::move(functions), id_seed);
  HarmonyOutput out;
  auto take = [&](HarmonyDelta d) {
    out.reasoning_content += d.reasoning_content;
    for (ToolCallEvent& e : d.events) {
      if (e.index < 0) {
        out.content += e.content;
      } else if (e.index == static_cast<int>(out.tool_calls.size())) {
        out.tool_calls.push_back(ToolCall{.id = e.id, .name = e.name, .arguments = e.arguments});
      } else {
        out.tool_calls[e.index].arguments += e.arguments;
      }
    }
  };
  take(stream.push(text));
  take(stream.finish());
  return out;
}

}  // namespace flashserve::output_parsers
