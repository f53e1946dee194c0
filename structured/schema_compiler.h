// Grammar sources: a JSON Schema, "any JSON object" (response_format json_object), a regex
// (guided_regex) and a list of choices (guided_choice), each compiled to a Grammar within the
// limits below. Refusals are SchemaError naming the keyword and its path (a 400 at the API edge).
// docs/STRUCTURED_OUTPUTS.md lists the supported subset and the output policy.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_grammar.h"

namespace flashserve::structured {

struct SchemaLimits {
  size_t max_schema_bytes = 256 * 1024;
  int max_depth = 64;                  // nesting of the schema text and of subschemas
  size_t max_enum = 1024;              // values of one enum (or choices of one list)
  size_t max_grammar_elements = 1 << 20;
  size_t max_pattern_bytes = 1024;
  int max_repeat = 1000;               // minLength, minItems, {m,n}; larger maxima are capped here
};

struct SchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kCompact;
  SchemaLimits limits;
  // A keyword that constrains the output but that the grammar cannot express: true refuses the
  // schema (SchemaError naming it); false drops it from the grammar and lists it in
  // SchemaReport::dropped, so the caller validates the output against the original schema.
  bool strict = true;
};

// What compiling a schema left out of the grammar.
struct SchemaReport {
  struct Dropped {
    std::string keyword, path, why;  // path: a JSON pointer to the keyword in the schema
  };
  // Keywords JSON Schema does not define (vendor annotations, misspellings), each with the path
  // of its first occurrence; ignored, as the specification says. Annotations it defines (title,
  // description, ...) are ignored silently and not listed.
  std::vector<std::pair<std::string, std::string>> unknown;
  std::vector<Dropped> dropped;  // only with strict false; empty: the grammar enforces it all
};

Grammar compile_json_schema(std::string_view schema_text, const SchemaOptions& options = {},
                            SchemaReport* report = nullptr);
// A schema's value between two literal texts (a tool call's markers around its JSON body).
Grammar compile_json_schema_between(std::string_view prefix, std::string_view schema_text,
                                    std::string_view suffix, const SchemaOptions& options = {},
                                    SchemaReport* report = nullptr);
// One of several texts, each followed by a value of its own schema, then the suffix: schema_text
// is {"anyOf": [...]} with one schema per prefix (a harmony call: the function's name and header
// before its arguments).
Grammar compile_json_schema_branches(const std::vector<std::string>& prefixes,
                                     std::string_view schema_text, std::string_view suffix,
                                     const SchemaOptions& options = {},
                                     SchemaReport* report = nullptr);
Grammar compile_json_object(const SchemaOptions& options = {});
Grammar compile_regex_grammar(std::string_view pattern, const SchemaOptions& options = {});
Grammar compile_choice_grammar(const std::vector<std::string>& choices, const SchemaOptions& options = {});

// The text a compiled schema is cached under: the schema re-serialized compactly (key order
// kept: it decides the output's property order). Throws SchemaError for invalid JSON or limits.
std::string canonical_schema_text(std::string_view schema_text, const SchemaOptions& options = {});

}  // namespace flashserve::structured
