// The constraint behind tool_choice: "required" or a named function constrain decoding to one
// well-formed call in the model's own format (its markers around a JSON body whose arguments
// match the function's parameters schema); "auto" applies that grammar lazily from the call's
// start token where the start marker is a single token, and leaves the output free otherwise.
// docs/TOOL_CALLING.md has the per-format table.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/api/openai_api.h"
#include "server/tool_calls/tools_request.h"

namespace flashserve::request {

// nullopt: no constraint (no tools, tool_choice none, or auto without a start token).
std::optional<OutputConstraint> tool_call_constraint(const ToolsRequest& tools,
                                                     const ServedModel& model);

// Harmony (gpt-oss): a forced call starts in the prompt, which ends with its header (a named
// function, or the only tool: the whole header; several tools: up to the function's name); ""
// when no call is forced. The constraint covers the rest: the arguments of that function, or
// one of the names, the header's end and that function's arguments (the grammar vocabulary
// spells <|constrain|> and <|message|>: ToolCallSyntax::grammar_spelled_ids).
std::string harmony_forced_header(const ToolsRequest& tools);

// The JSON Schema of a call's body for these functions (anyOf over them), in `format`'s shape:
// {"name": const, "arguments" (Llama: "parameters"): the function's schema}, in a list for
// Mistral. Each function's local $refs are rebased to where its schema now sits.
nlohmann::ordered_json call_body_schema(output_parsers::ToolCallFormat format,
                                        const ToolsRequest& tools,
                                        const std::vector<std::string>& names);

}  // namespace flashserve::request
