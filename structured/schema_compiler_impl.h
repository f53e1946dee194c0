// The JSON Schema compiler's class, shared by schema_compiler.cpp (dispatch, $ref, enum, anyOf,
// allOf) and schema_types.cpp (objects, arrays, strings, numbers). Internal to structured/.
#pragma once

#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "structured/json_grammar.h"
#include "structured/schema_compiler.h"

namespace flashserve::structured {

using Json = nlohmann::ordered_json;

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const SchemaOptions& options);
  // prefix + a value of the schema + suffix (literal texts; both empty for a plain schema).
  Grammar compile(std::string_view prefix = "", std::string_view suffix = "");
  // The root is {"anyOf": [one schema per prefix]}: prefix i, then a value of schema i, then
  // the suffix.
  Grammar compile_branches(const std::vector<std::string>& prefixes, std::string_view suffix);
  const SchemaReport& report() const { return report_; }

 private:
  // A subschema's grammar. Best effort (strict off): a keyword the grammar cannot express is
  // dropped from this subschema (recorded in report_.dropped) and the subschema compiled again.
  Sym schema(const Json& s, const std::string& path, int depth);
  Sym exact(const Json& s, const std::string& path, int depth);
  Sym ref(const Json& s, const std::string& path, int depth);
  Sym literal_choices(const Json& s, const std::string& path);
  // The distinct values of an enum/const that satisfy the keywords beside it.
  std::vector<Json> allowed_values(const Json& s, const std::string& path);
  Sym any_of(const Json& s, const std::string& path, int depth);
  Json merge_all_of(const Json& s, const std::string& path, int depth);
  Sym typed(const Json& s, const std::string& type, const std::string& path, int depth);
  Sym object(const Json& s, const std::string& path, int depth);
  Sym array(const Json& s, const std::string& path, int depth);
  Sym unique_literals(const Json& items, int min, int max, const std::string& path);
  Sym string(const Json& s, const std::string& path);
  Sym numeric(const Json& s, bool integer, const std::string& path);
  Sym multiples(const Json& s, std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& path);
  // s with `not` folded into its other keywords (type, enum/const, an excluded string), or a
  // SchemaError naming `not` for other forms.
  Json without_not(const Json& s, const std::string& path);
  // s with its dependentRequired / dependencies / dependentSchemas as alternatives (the
  // property absent, or present with what it needs): an anyOf the compiler then expands.
  Json dependencies_as_alternatives(const Json& s, const std::string& path);
  Sym extra_key(const std::set<std::string>& declared);
  // A JSON string whose text matches the regex (search semantics), compiled once per schema.
  Sym regex_string(const std::string& pattern, const char* keyword, const std::string& path);
  // patternProperties' one pattern and schema; checks that no declared name matches it.
  std::pair<std::string, const Json*> key_pattern(const Json& s, const std::set<std::string>& declared,
                                                  const std::string& path) const;

  // s with its keywords checked: unknown ones recorded, known ones the compiler does not enforce
  // refused (strict) or left out of the copy in `storage` (best effort).
  const Json& checked(const Json& s, const std::string& path, Json& storage);
  // Records an unknown keyword (or a format JSON Schema does not define) once per schema.
  void note_unknown(const std::string& what, const std::string& path);
  // Forgets the $ref rules made since ref_log_ held n (a failed attempt's may be unfinished).
  void undo_refs(size_t n);
  std::vector<std::string> types_of(const Json& s, const std::string& path) const;
  int count(const Json& s, const char* key, const std::string& path, int fallback) const;
  const Json& resolve(const std::string& pointer, const std::string& path) const;
  [[noreturn]] void fail(const std::string& keyword, const std::string& path, const std::string& why) const;

  const Json& root_;
  SchemaOptions options_;
  GrammarBuilder b_;
  JsonGrammar json_;
  SchemaReport report_;
  std::set<std::string> unknown_seen_;
  std::map<std::string, int32_t> ref_rules_;  // $ref target -> its rule (recursion)
  std::vector<std::string> ref_log_;          // ref_rules_' keys in insertion order (undo)
  int any_of_depth_ = 0;                      // anyOf/oneOf alternatives being compiled
  std::map<std::string, Sym> pattern_rules_;  // a pattern or format's regex -> its string rule
  std::map<std::string, Sym> product_rules_;  // lengths and regexes -> their intersection's string rule
};

// What a key of a schema object is to the compiler.
enum class KeywordKind {
  kAnnotation,   // defined by JSON Schema or OpenAPI, constrains nothing: ignored silently
  kEnforced,     // compiled into the grammar
  kUnenforced,   // constrains the output, the grammar does not express it: refused or dropped
  kUnknown,      // not a JSON Schema keyword: ignored and reported
};
KeywordKind keyword_kind(const std::string& key);
// Annotations and unknown keywords: no effect on what is generated.
inline bool ignorable(const std::string& key) {
  const KeywordKind k = keyword_kind(key);
  return k == KeywordKind::kAnnotation || k == KeywordKind::kUnknown;
}
// Whether a JSON value is of a JSON Schema type ("integer": a number with no fraction).
bool value_has_type(const Json& v, const std::string& type);

}  // namespace flashserve::structured
