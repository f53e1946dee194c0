// Structured outputs at the API edge: response_format ({"type": "text" | "json_object" |
// "json_schema"}) and vLLM's guided_json / guided_regex / guided_choice, on both endpoints,
// compiled in the handler thread with the model's GrammarCompiler into the constraint the engine
// enforces. A schema the compiler refuses is a 400 naming the parameter, keyword and path.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/api/openai_api.h"

namespace flashserve::structured {
class SchemaError;
}

namespace flashserve::request {

// The body's fields that ask for structured output (response_format and the guided_* fields).
bool has_output_format(const nlohmann::json& j);

// Reads them (at most one may ask for a constraint) into a constraint ending at the EOS ids;
// nullopt for none or {"type": "text"}. `body` is re-read with its key order kept, because a
// schema's property order is the order the output writes them in.
std::optional<OutputConstraint> read_output_format(const nlohmann::json& j, std::string_view body,
                                                   const ServedModel& model);

// The 400 for a constraint the compiler refused: "<param>: '<keyword>' at <path>: <problem>".
ApiError schema_error(const std::string& param, const structured::SchemaError& e);

// The model's grammar compiler, or a 400 blaming `param` when structured output is unavailable.
structured::GrammarCompiler& grammar_compiler(const ServedModel& model, const std::string& param);

}  // namespace flashserve::request
