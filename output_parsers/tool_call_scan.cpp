// scan_tool_calls: the content between calls. Content runs up to the next start marker of the
// format; a tail that could still become a marker is held back (not settled) until more text or
// the end decides it; what follows a marker is left to the format's reader.
#include "output_parsers/tool_call_scan.h"

#include "output_parsers/partial_marker.h"

namespace flashserve::output_parsers {
namespace {

std::string_view start_marker(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "<tool_call>";
    case ToolCallFormat::kMistral: return "[TOOL_CALLS]";
    case ToolCallFormat::kLlama3Json: return "<|python_tag|>";
    case ToolCallFormat::kNone:
    case ToolCallFormat::kHarmony: break;
  }
  return {};
}

CallsRead read_calls(ToolCallFormat format, std::string_view text, size_t pos, bool final) {
  switch (format) {
    case ToolCallFormat::kHermes: return read_hermes_calls(text, pos, final);
    case ToolCallFormat::kMistral: return read_mistral_calls(text, pos, final);
    default: return read_llama3_calls(text, pos, final);
  }
}

// Where the next marker starts at or after pos (full = true), else where a tail of the text that
// is a proper beginning of the marker starts (only when more text may come), else text.size().
struct MarkerHit {
  size_t pos;
  bool full;
};

MarkerHit find_marker(std::string_view text, size_t pos, std::string_view marker, bool final) {
  const size_t at = text.find(marker, pos);
  if (at != std::string_view::npos) return {at, true};
  return {final ? text.size() : partial_marker_start(text, pos, marker), false};
}

}  // namespace

ScanResult scan_tool_calls(ToolCallFormat format, std::string_view text, bool final,
                           bool at_output_start) {
  ScanResult r;
  auto add_content = [&](size_t begin, size_t end) {
    if (end > begin) r.segments.push_back(Segment{.content = text.substr(begin, end - begin)});
  };
  auto settle = [&](size_t at) {
    r.stable = at;
    r.stable_segments = r.segments.size();
  };
  if (format == ToolCallFormat::kNone) {
    add_content(0, text.size());
    settle(text.size());
    return r;
  }
  const std::string_view marker = start_marker(format);
  size_t pos = 0;
  // Reads the calls after a marker text[begin, end) (an empty one for Llama's bare JSON); returns
  // false when the rest of the text is held back.
  auto take_calls = [&](size_t begin, size_t end) {
    CallsRead read = read_calls(format, text, end, final);
    r.segments.insert(r.segments.end(), read.calls.begin(), read.calls.end());
    if (read.kind == CallsRead::Kind::kHeld) return false;
    if (read.kind == CallsRead::Kind::kMalformed) {
      add_content(begin, end);
      pos = end;
    } else {
      pos = read.resume;
    }
    settle(pos);
    return true;
  };
  if (at_output_start && format == ToolCallFormat::kLlama3Json) {
    const size_t first = skip_json_space(text, 0);
    if (first == text.size() && !final) return r;  // only whitespace so far: undecided
    if (first < text.size() && text[first] == '{') {
      add_content(0, first);
      if (!take_calls(first, first)) return r;
    }
  }
  while (true) {
    const MarkerHit hit = find_marker(text, pos, marker, final);
    add_content(pos, hit.pos);
    settle(hit.pos);
    if (!hit.full) return r;
    if (!take_calls(hit.pos, hit.pos + marker.size())) return r;
  }
}

}  // namespace flashserve::output_parsers
