// Structured outputs at the API edge: response_format ({"type": "text" | "json_object" |
// "json_schema"}) and vLLM's guided_json / guided_regex / guided_choice, on both endpoints,
// compiled in the handler thread with the model's GrammarCompiler into the constraint the engine
// enforces. A schema the compiler refuses is a 400 naming the parameter, keyword and path.
// json_schema.strict true refuses keywords the grammar cannot enforce; absent or false (and
// guided_json) drops them from the grammar, and the finished output is validated against the
// original schema (schema_mismatch below). Unknown keywords are ignored and logged once per
// compiled schema.
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

// A finished output (`generated`: the choice's text after any echo) against the original schema,
// when the request's grammar dropped keywords (best effort): nullopt when valid or fully
// enforced, else the "schema_violation" extension field of the choice, whose finish_reason
// becomes "schema_mismatch".
std::optional<nlohmann::json> schema_mismatch(const CompletionRequest& req, std::string_view generated);

// The 400 for a constraint the compiler refused: "<param>: '<keyword>' at <path>: <problem>".
ApiError schema_error(const std::string& param, const structured::SchemaError& e);

// The model's grammar compiler, or a 400 blaming `param` when structured output is unavailable.
structured::GrammarCompiler& grammar_compiler(const ServedModel& model, const std::string& param);

}  // namespace flashserve::request
