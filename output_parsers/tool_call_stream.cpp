// parse_tool_calls and ToolCallStream. The stream rescans the text after its last settled point on
// every delta and sends only what the scan adds to what was already sent: settled text is never
// scanned again, and a call in progress costs a rescan of that call alone.
#include <algorithm>

#include "core/error.h"
#include "output_parsers/tool_call_parser.h"
#include "output_parsers/tool_call_scan.h"

namespace flashserve::output_parsers {
namespace {

void add_content_event(std::vector<ToolCallEvent>& events, std::string text) {
  if (text.empty()) return;
  if (!events.empty() && events.back().index < 0) {
    events.back().content += text;  // one content piece per push
    return;
  }
  ToolCallEvent e;
  e.content = std::move(text);
  events.push_back(std::move(e));
}

}  // namespace

ParsedOutput parse_tool_calls(ToolCallFormat format, std::string_view text, uint64_t id_seed) {
  FS_CHECK(format != ToolCallFormat::kHarmony, "harmony output is parsed by HarmonyStream");
  ParsedOutput out;
  if (format == ToolCallFormat::kNone) {
    out.content = std::string(text);
    return out;
  }
  CallIdGenerator ids(id_seed);
  std::string content;
  for (const Segment& s : scan_tool_calls(format, text, /*final=*/true, /*at_output_start=*/true).segments) {
    if (!s.is_call) {
      content += s.content;
      continue;
    }
    out.tool_calls.push_back(ToolCall{.id = ids.next(), .name = s.name, .arguments = std::string(s.arguments)});
  }
  out.content = std::string(trim_space(content));
  return out;
}

ToolCallStream::ToolCallStream(ToolCallFormat format, uint64_t id_seed)
    : format_(format), ids_(id_seed) {
  FS_CHECK(format != ToolCallFormat::kHarmony, "harmony output is parsed by HarmonyStream");
}

std::vector<ToolCallEvent> ToolCallStream::push(std::string_view delta) {
  FS_CHECK(!finished_, "ToolCallStream::push after finish");
  pending_ += delta;
  return advance(/*final=*/false);
}

std::vector<ToolCallEvent> ToolCallStream::finish() {
  if (finished_) return {};
  finished_ = true;
  return advance(/*final=*/true);
}

std::vector<ToolCallEvent> ToolCallStream::advance(bool final) {
  std::vector<ToolCallEvent> events;
  if (format_ == ToolCallFormat::kNone) {
    add_content_event(events, std::move(pending_));
    pending_.clear();
    return events;
  }
  const ScanResult r = scan_tool_calls(format_, pending_, final, at_output_start_);
  size_t content_seen = 0, calls_seen = 0;
  for (size_t s = 0; s < r.segments.size(); ++s) {
    const Segment& seg = r.segments[s];
    if (!seg.is_call) {
      const size_t end = content_seen + seg.content.size();
      if (end > open_content_sent_) {
        const size_t from = std::max(open_content_sent_, content_seen) - content_seen;
        add_content_event(events, content_trim_.push(seg.content.substr(from)));
        open_content_sent_ = end;
      }
      content_seen = end;
      continue;
    }
    const size_t k = calls_seen++;
    if (k == open_args_sent_.size()) {
      ToolCallEvent e;
      e.index = calls_closed_ + static_cast<int>(k);
      e.id = ids_.next();
      e.name = seg.name;
      e.arguments = std::string(seg.arguments);
      events.push_back(std::move(e));
      open_args_sent_.push_back(seg.arguments.size());
      continue;
    }
    // A scan never takes back what an earlier one settled or sent: a failure here is a parser bug.
    FS_CHECK(seg.arguments.size() >= open_args_sent_[k], "tool call arguments shrank");
    if (seg.arguments.size() > open_args_sent_[k]) {
      ToolCallEvent e;
      e.index = calls_closed_ + static_cast<int>(k);
      e.arguments = std::string(seg.arguments.substr(open_args_sent_[k]));
      events.push_back(std::move(e));
      open_args_sent_[k] = seg.arguments.size();
    }
  }
  FS_CHECK(content_seen >= open_content_sent_ && calls_seen >= open_args_sent_.size(),
           "tool call scan took back sent text");
  // Forget the settled segments: pending_ restarts at r.stable.
  size_t settled_content = 0, settled_calls = 0;
  for (size_t s = 0; s < r.stable_segments; ++s) {
    if (r.segments[s].is_call) {
      ++settled_calls;
    } else {
      settled_content += r.segments[s].content.size();
    }
  }
  open_content_sent_ -= settled_content;
  open_args_sent_.erase(open_args_sent_.begin(), open_args_sent_.begin() + settled_calls);
  calls_closed_ += static_cast<int>(settled_calls);
  pending_.erase(0, r.stable);
  if (r.stable > 0) at_output_start_ = false;
  return events;
}

}  // namespace flashserve::output_parsers
