// Which tool-call format a model writes: by the --tool-call-parser name, or by the markers its chat
// template contains (a template that renders tool calls shows the model its own format).
#include "core/error.h"
#include "output_parsers/harmony_parser.h"
#include "output_parsers/tool_call_parser.h"

namespace flashserve::output_parsers {

ToolCallFormat detect_tool_call_format(std::string_view chat_template) {
  auto has = [&](std::string_view s) { return chat_template.find(s) != std::string_view::npos; };
  // gpt-oss's template opens channels; it also names tool calls, but in its own header syntax.
  if (template_is_harmony(chat_template)) return ToolCallFormat::kHarmony;
  // Hermes-style templates of Llama-based models (Hermes 3) contain Llama headers too: check first.
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has("<|python_tag|>") || has("ipython") || has("<|start_header_id|>")) {
    return ToolCallFormat::kLlama3Json;
  }
  return ToolCallFormat::kNone;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kHarmony: return "harmony";
    case ToolCallFormat::kNone: break;
  }
  return "none";
}

ToolCallFormat choose_tool_call_format(std::string_view name, std::string_view chat_template) {
  if (name.empty() || name == "auto") return detect_tool_call_format(chat_template);
  for (ToolCallFormat f : {ToolCallFormat::kNone, ToolCallFormat::kHermes,
                           ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral,
                           ToolCallFormat::kHarmony}) {
    if (name == tool_call_format_name(f)) return f;
  }
  FS_THROW("--tool-call-parser: unknown parser '", name,
           "' (choose auto, hermes, llama3_json, mistral, harmony or none)");
}

}  // namespace flashserve::output_parsers
