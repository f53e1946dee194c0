// The format-specific half of tool-call parsing: a scan of (a prefix of) the model's output into
// content pieces and calls, in order, saying how far the scan is settled. Both the whole-text
// parse and the stream (tool_call_stream.cpp) are built on it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "output_parsers/tool_call_parser.h"

namespace flashserve::output_parsers {

struct Segment {
  bool is_call = false;
  std::string_view content{};  // !is_call: raw text that is content (a view into the scanned text)
  std::string name{};          // is_call
  std::string_view arguments{};  // is_call: the arguments' JSON text so far
};

struct ScanResult {
  std::vector<Segment> segments;
  // text[0, stable) is settled: its segments (the first stable_segments) never change with more
  // text, and a scan of text[stable, ...) with at_output_start = false continues it exactly.
  size_t stable = 0;
  size_t stable_segments = 0;
};

// Scans text. `final`: no more text comes, so held-back beginnings are decided. at_output_start:
// text begins the model's output (Llama's bare JSON call is recognised only there).
ScanResult scan_tool_calls(ToolCallFormat format, std::string_view text, bool final,
                           bool at_output_start);

// What follows a start marker (or, for Llama, the output's first '{'), for one format.
struct CallsRead {
  enum class Kind {
    kHeld,       // more text is needed to decide (never when final); `calls` are committed so far
    kMalformed,  // nothing committed: the marker is content and scanning resumes after it
    kDone,       // `calls` are complete (the last may be cut short); content resumes at `resume`
  } kind;
  std::vector<Segment> calls{};
  size_t resume = 0;
};

// Each reads from text[pos], just past the marker. final: as in scan_tool_calls.
CallsRead read_hermes_calls(std::string_view text, size_t pos, bool final);
CallsRead read_mistral_calls(std::string_view text, size_t pos, bool final);
CallsRead read_llama3_calls(std::string_view text, size_t pos, bool final);

}  // namespace flashserve::output_parsers
