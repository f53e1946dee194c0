// How the served model writes a tool call, decided once at start-up: the parser's format (from
// the chat template, or --tool-call-parser) and its start/end markers, with the single tokens
// that spell them where the vocabulary has one. A marker that is one token can trigger a lazily
// applied grammar (engine/engine.h, OutputConstraint); otherwise the marker is grammar text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "output_parsers/tool_call_parser.h"

namespace flashserve {

class Tokenizer;

struct ToolCallSyntax {
  output_parsers::ToolCallFormat format = output_parsers::ToolCallFormat::kNone;
  // The template reads `tools`; otherwise the API edge describes them in a system message in
  // the Hermes style (server/tool_calls/tools_prompt.h) and format is kHermes.
  bool template_uses_tools = true;
  std::string start_text, end_text;  // "<tool_call>" / "</tool_call>" (harmony: "" / "<|call|>"); "" = none
  int32_t start_id = -1, end_id = -1;  // the one token spelling each marker; -1: none
  int32_t message_id = -1;  // kHarmony: <|message|>, after which a call's arguments begin
  // kHarmony: the special tokens a forced call's grammar writes (<|constrain|>, <|message|>
  // between the function's name and its arguments): the grammar vocabulary spells them
  // (structured::vocabulary_from_tokenizer's spelled_ids).
  std::vector<int32_t> grammar_spelled_ids;
  // Marker tokens that decode to nothing (special tokens): the output keeps their text (harmony:
  // all seven of its markers).
  std::vector<int32_t> silent_ids;
};

// parser_flag: --tool-call-parser ("" or "auto": from the template). Throws flashserve::Error
// naming the flag for an unknown name.
ToolCallSyntax tool_call_syntax(std::string_view parser_flag, std::string_view template_source,
                                bool template_uses_tools, const Tokenizer& tokenizer);

}  // namespace flashserve
