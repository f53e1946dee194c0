// Runs a ToolCallStream over given pieces of an output and joins its events back into the parse
// they add up to, checking on the way that they have OpenAI's delta shape (a call's first piece
// carries its id and name, later ones only arguments, indices count up from 0). Used by the tests
// and the fuzz target.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "output_parsers/tool_call_parser.h"

namespace flashserve::output_parsers::testing {

struct JoinedStream {
  ParsedOutput output;
  std::string problem;         // the first shape violation, empty if none
  size_t argument_pieces = 0;  // events that carried argument text
};

inline void join_events(const std::vector<ToolCallEvent>& events, JoinedStream& j) {
  auto& calls = j.output.tool_calls;
  for (const ToolCallEvent& e : events) {
    if (!e.arguments.empty()) ++j.argument_pieces;
    if (e.index < 0) {
      if (e.content.empty() || !e.id.empty() || !e.name.empty() || !e.arguments.empty()) {
        j.problem = "a content event that is empty or carries call fields";
      }
      j.output.content += e.content;
    } else if (e.index == static_cast<int>(calls.size())) {
      if (e.id.size() != 29 || e.id.rfind("call_", 0) != 0 || e.name.empty()) {
        j.problem = "a call's first piece without a proper id or name";
      }
      calls.push_back(ToolCall{.id = e.id, .name = e.name, .arguments = e.arguments});
    } else if (e.index == static_cast<int>(calls.size()) - 1) {
      if (!e.id.empty() || !e.name.empty() || e.arguments.empty()) {
        j.problem = "a later piece of a call with an id, a name or no arguments";
      }
      calls.back().arguments += e.arguments;
    } else {
      j.problem = "a call index out of order";
    }
  }
}

inline JoinedStream join_tool_call_stream(ToolCallFormat format, uint64_t seed,
                                          const std::vector<std::string_view>& pieces) {
  JoinedStream j;
  ToolCallStream stream(format, seed);
  for (std::string_view p : pieces) join_events(stream.push(p), j);
  join_events(stream.finish(), j);
  if (stream.num_calls() != static_cast<int>(j.output.tool_calls.size())) {
    j.problem = "num_calls() disagrees with the events";
  }
  return j;
}

// The differences between two parses, empty when they are equal.
inline std::string parse_difference(const ParsedOutput& a, const ParsedOutput& b) {
  if (a.content != b.content) return "content \"" + a.content + "\" vs \"" + b.content + "\"";
  if (a.tool_calls.size() != b.tool_calls.size()) return "a different number of calls";
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const ToolCall &x = a.tool_calls[i], &y = b.tool_calls[i];
    if (x.id != y.id || x.name != y.name || x.arguments != y.arguments) {
      return "call " + std::to_string(i) + ": " + x.name + " " + x.arguments + " vs " + y.name +
             " " + y.arguments;
    }
  }
  return {};
}

}  // namespace flashserve::output_parsers::testing
