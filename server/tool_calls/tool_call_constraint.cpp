// Forced and lazily triggered tool-call grammars (see tool_call_constraint.h).
#include "server/tool_calls/tool_call_constraint.h"

#include "server/api/response_format.h"
#include "structured/compiled_grammar.h"
#include "structured/schema_error.h"

namespace flashserve::request {

using ordered_json = nlohmann::ordered_json;
using output_parsers::ToolCallFormat;

namespace {

// A schema moved from a document's root to `pointer` inside another: its local references
// ("#", "#/$defs/x") must point where their targets now are.
void rebase_refs(ordered_json& s, const std::string& pointer) {
  if (s.is_object()) {
    for (auto& [key, value] : s.items()) {
      if (key == "$ref" && value.is_string() && value.get<std::string>().rfind('#', 0) == 0) {
        value = "#" + pointer + value.get<std::string>().substr(1);
      } else {
        rebase_refs(value, pointer);
      }
    }
  } else if (s.is_array()) {
    for (auto& v : s) rebase_refs(v, pointer);
  }
}

}  // namespace

ordered_json call_body_schema(ToolCallFormat format, const ToolsRequest& tools,
                              const std::vector<std::string>& names) {
  const bool in_list = format == ToolCallFormat::kMistral;
  const char* args_key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  const std::string base = in_list ? "/items/anyOf/" : "/anyOf/";
  ordered_json any = ordered_json::array();
  for (size_t i = 0; i < names.size(); ++i) {
    ordered_json params = ordered_json::parse(tools.parameters(names[i]));
    rebase_refs(params, base + std::to_string(i) + "/properties/" + args_key);
    ordered_json call = {{"type", "object"}};
    call["properties"] = {{"name", {{"const", names[i]}}}, {args_key, params}};
    call["required"] = {"name", args_key};
    call["additionalProperties"] = false;
    any.push_back(std::move(call));
  }
  ordered_json body = {{"anyOf", any}};
  if (!in_list) return body;
  ordered_json list = {{"type", "array"}, {"items", body}, {"minItems", 1}};
  if (!tools.parallel) list["maxItems"] = 1;
  return list;
}

namespace {

// The one function a forced harmony call goes to; "" when the model chooses among several.
std::string forced_function(const ToolsRequest& tools) {
  if (tools.choice == ToolsRequest::Choice::kNamed) return tools.named;
  return tools.tools.size() == 1 ? tools.tools[0]["function"]["name"].get<std::string>() : "";
}

// Harmony: the arguments of a forced call as a grammar (see harmony_forced_header).
std::optional<OutputConstraint> harmony_constraint(const ToolsRequest& tools,
                                                   const ServedModel& model) {
  using Choice = ToolsRequest::Choice;
  if (tools.choice != Choice::kRequired && tools.choice != Choice::kNamed) return std::nullopt;
  const ToolCallSyntax& syn = model.tool_calls;
  const std::string one = forced_function(tools);
  OutputConstraint c;
  try {
    if (!one.empty()) {
      c.grammar = grammar_compiler(model, "tools").json_schema_between("", tools.parameters(one), "");
    } else {
      // The rest of the header, then that function's arguments: one branch per function.
      ordered_json any = ordered_json::array();
      std::vector<std::string> headers;
      for (const auto& t : tools.tools) {
        const std::string name = t["function"]["name"].get<std::string>();
        ordered_json params = ordered_json::parse(tools.parameters(name));
        rebase_refs(params, "/anyOf/" + std::to_string(any.size()));
        any.push_back(std::move(params));
        headers.push_back(name + " <|constrain|>json<|message|>");
      }
      c.grammar = grammar_compiler(model, "tools").json_schema_branches(
          headers, ordered_json{{"anyOf", std::move(any)}}.dump(), "");
    }
  } catch (const structured::SchemaError& e) {
    throw schema_error("tools", e);
  }
  c.end_tokens = syn.end_id >= 0 ? std::vector<int32_t>{syn.end_id} : model.eos_ids;
  return c;
}

}  // namespace

std::string harmony_forced_header(const ToolsRequest& tools) {
  using Choice = ToolsRequest::Choice;
  if (!tools.any() || (tools.choice != Choice::kRequired && tools.choice != Choice::kNamed)) {
    return "";
  }
  const std::string one = forced_function(tools);
  if (one.empty()) return "<|channel|>commentary to=functions.";
  return "<|channel|>commentary to=functions." + one + " <|constrain|>json<|message|>";
}

std::optional<OutputConstraint> tool_call_constraint(const ToolsRequest& tools,
                                                     const ServedModel& model) {
  using Choice = ToolsRequest::Choice;
  if (!tools.any() || tools.choice == Choice::kNone) return std::nullopt;
  const ToolCallSyntax& syn = model.tool_calls;
  if (syn.format == ToolCallFormat::kHarmony) return harmony_constraint(tools, model);
  const bool forced = tools.choice == Choice::kRequired || tools.choice == Choice::kNamed;
  if (syn.format == ToolCallFormat::kNone) {
    if (!forced) return std::nullopt;
    throw bad_request("'tool_choice' needs a tool-call format, and this model's chat template "
                      "names none; start flashserve with --tool-call-parser NAME", "tool_choice",
                      "unsupported_parameter");
  }
  const bool triggered = syn.start_id >= 0;
  if (!forced && !triggered) return std::nullopt;  // auto with a textual marker: free output

  std::vector<std::string> names;
  if (tools.choice == Choice::kNamed) {
    names.push_back(tools.named);
  } else {
    for (const auto& t : tools.tools) names.push_back(t["function"]["name"].get<std::string>());
  }
  // The text around the body: Hermes puts the JSON on its own line. A marker that is a token is
  // the trigger (or end token) rather than grammar text.
  const bool hermes = syn.format == ToolCallFormat::kHermes;
  std::string prefix = (triggered ? "" : syn.start_text) + (hermes ? "\n" : "");
  std::string suffix = hermes ? "\n" : "";
  if (syn.end_id < 0 || !triggered) suffix += syn.end_text;

  OutputConstraint c;
  const std::string body = call_body_schema(syn.format, tools, names).dump();
  try {
    c.grammar = grammar_compiler(model, "tools").json_schema_between(prefix, body, suffix);
  } catch (const structured::SchemaError& e) {
    throw schema_error("tools", e);
  }
  if (triggered) {
    c.triggers = {syn.start_id};
    c.must_trigger = forced;
  }
  c.end_tokens = triggered && syn.end_id >= 0 ? std::vector<int32_t>{syn.end_id} : model.eos_ids;
  return c;
}

}  // namespace flashserve::request
