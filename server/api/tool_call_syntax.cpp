// ToolCallSyntax (see tool_call_syntax.h): the format's markers, and the token ids that spell
// them in this vocabulary.
#include "server/api/tool_call_syntax.h"

#include "tokenizer/tokenizer.h"

namespace flashserve {

namespace {

using output_parsers::ToolCallFormat;

// The one token that spells `text`: a special token with that text, or a plain encoding of
// exactly one id (Qwen's <tool_call> is an added, non-special token). -1 when there is none.
int32_t single_token(const Tokenizer& tok, const std::string& text) {
  if (text.empty()) return -1;
  for (const SpecialToken& s : tok.special_tokens()) {
    if (s.text == text) return s.id;
  }
  try {
    std::vector<int32_t> ids = tok.encode(text, /*add_bos=*/false);
    if (ids.size() == 1 && tok.piece(ids[0]) == text) return ids[0];
  } catch (const std::exception&) {
  }
  return -1;
}

}  // namespace

ToolCallSyntax tool_call_syntax(std::string_view parser_flag, std::string_view template_source,
                                bool template_uses_tools, const Tokenizer& tokenizer) {
  ToolCallSyntax s;
  s.template_uses_tools = template_uses_tools;
  s.format = output_parsers::choose_tool_call_format(parser_flag, template_source);
  // Tools described by our Hermes-style system block are answered in that format.
  if (!template_uses_tools && (parser_flag.empty() || parser_flag == "auto")) {
    s.format = ToolCallFormat::kHermes;
  }
  switch (s.format) {
    case ToolCallFormat::kHermes: s.start_text = "<tool_call>"; s.end_text = "</tool_call>"; break;
    case ToolCallFormat::kLlama3Json: s.start_text = "<|python_tag|>"; break;
    case ToolCallFormat::kMistral: s.start_text = "[TOOL_CALLS]"; break;
    case ToolCallFormat::kHarmony: s.end_text = "<|call|>"; break;
    case ToolCallFormat::kNone: break;
  }
  s.start_id = single_token(tokenizer, s.start_text);
  s.end_id = single_token(tokenizer, s.end_text);
  std::vector<int32_t> markers = {s.start_id, s.end_id};
  if (s.format == ToolCallFormat::kHarmony) {
    // Every marker of a harmony message: the parser reads the headers and ends of all of them.
    s.message_id = single_token(tokenizer, "<|message|>");
    for (const char* m : {"<|constrain|>", "<|message|>"}) {
      if (int32_t id = single_token(tokenizer, m); id >= 0) s.grammar_spelled_ids.push_back(id);
    }
    for (const char* m : {"<|start|>", "<|channel|>", "<|constrain|>", "<|message|>", "<|end|>",
                          "<|return|>"}) {
      markers.push_back(single_token(tokenizer, m));
    }
  }
  for (int32_t id : markers) {
    if (id >= 0 && tokenizer.decode({id}).empty()) s.silent_ids.push_back(id);
  }
  return s;
}

}  // namespace flashserve
