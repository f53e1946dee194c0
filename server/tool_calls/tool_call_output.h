// Chat output with tools, in OpenAI's shapes: the generated text parsed by output_parsers/ into
// message.tool_calls ({"id", "type": "function", "function": {"name", "arguments"}}) with the
// text around the calls as content, whole or as stream deltas (delta.tool_calls[] with index,
// then id/name, then argument fragments). The finish reason of a choice that called is
// "tool_calls". With parallel_tool_calls false only the first call is returned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "output_parsers/harmony_parser.h"
#include "output_parsers/tool_call_parser.h"

namespace flashserve {

// The whole choice's message; `finish_reason` becomes "tool_calls" when a call was made and the
// output ended on its own ("stop").
nlohmann::json tool_call_message(output_parsers::ToolCallFormat format, const std::string& text,
                                 bool parallel, uint64_t id_seed, std::string* finish_reason);

// A streamed choice: text deltas in, chunk deltas out ({"content"} or {"tool_calls": [...]}).
// Joined, they give tool_call_message's message for the same seed.
class ToolCallDeltas {
 public:
  ToolCallDeltas(output_parsers::ToolCallFormat format, bool parallel, uint64_t id_seed)
      : stream_(format, id_seed), parallel_(parallel) {}
  std::vector<nlohmann::json> push(const std::string& text) { return shape(stream_.push(text)); }
  std::vector<nlohmann::json> finish() { return shape(stream_.finish()); }
  bool called() const { return called_; }

 private:
  std::vector<nlohmann::json> shape(const std::vector<output_parsers::ToolCallEvent>& events);
  output_parsers::ToolCallStream stream_;
  bool parallel_;
  bool called_ = false;
};

// A harmony (gpt-oss) choice's message: content, tool_calls to the offered `functions`, and
// reasoning_content (null when there is none), from output_parsers/harmony_parser.h.
nlohmann::json harmony_message(const std::string& text, const std::vector<std::string>& functions,
                               bool parallel, uint64_t id_seed, std::string* finish_reason);

// A streamed harmony choice: text deltas in, chunk deltas out ({"reasoning_content"},
// {"content"} or {"tool_calls": [...]}). Joined, they give harmony_message's message.
class HarmonyDeltas {
 public:
  HarmonyDeltas(std::vector<std::string> functions, bool parallel, uint64_t id_seed)
      : stream_(std::move(functions), id_seed), parallel_(parallel) {}
  std::vector<nlohmann::json> push(const std::string& text) { return shape(stream_.push(text)); }
  std::vector<nlohmann::json> finish() { return shape(stream_.finish()); }
  bool called() const { return called_; }

 private:
  std::vector<nlohmann::json> shape(const output_parsers::HarmonyDelta& delta);
  output_parsers::HarmonyStream stream_;
  bool parallel_;
  bool called_ = false;
};

// "stop" becomes "tool_calls" when the choice called a function.
std::string tool_finish_reason(const std::string& reason, bool called);

}  // namespace flashserve
