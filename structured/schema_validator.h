// SchemaValidator: checks a JSON text against a JSON Schema as the specification reads it (every
// keyword of drafts 4 to 2020-12 that constrains a value, local $refs). Best-effort structured
// output (SchemaOptions::strict false) drops keywords the grammar cannot express; the server
// validates each finished output against the original schema with this, so a mismatch is
// reported instead of being returned as valid. docs/STRUCTURED_OUTPUTS.md says what it cannot
// check (remote $refs, regexes std::regex does not parse, $dynamicRef): those pass.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace flashserve::structured {

struct SchemaViolation {
  std::string keyword;        // the failing keyword ("json" for text that is not JSON)
  std::string schema_path;    // JSON pointer to the keyword in the schema
  std::string instance_path;  // JSON pointer to the failing value in the output
  std::string message;
};

class SchemaValidator {
 public:
  // Throws SchemaError("schema", "") when the text is not JSON.
  explicit SchemaValidator(std::string_view schema_text);
  // The first violation found (depth first), or nullopt when the text is valid. Thread-safe.
  std::optional<SchemaViolation> validate(std::string_view json_text) const;
  std::optional<SchemaViolation> validate_value(const nlohmann::json& value) const;

 private:
  nlohmann::json root_;
};

}  // namespace flashserve::structured
