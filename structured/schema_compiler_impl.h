// The JSON Schema compiler's class, shared by schema_compiler.cpp (dispatch, $ref, enum, anyOf,
// allOf) and schema_types.cpp (objects, arrays, strings, numbers). Internal to structured/.
#pragma once

#include <map>
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

 private:
  Sym schema(const Json& s, const std::string& path, int depth);
  Sym ref(const Json& s, const std::string& path, int depth);
  Sym literal_choices(const Json& s, const std::string& path);
  Sym any_of(const Json& s, const std::string& path, int depth);
  Json merge_all_of(const Json& s, const std::string& path, int depth);
  Sym typed(const Json& s, const std::string& type, const std::string& path, int depth);
  Sym object(const Json& s, const std::string& path, int depth);
  Sym array(const Json& s, const std::string& path, int depth);
  Sym string(const Json& s, const std::string& path);
  Sym numeric(const Json& s, bool integer, const std::string& path);
  Sym extra_key(const std::set<std::string>& declared);

  void check_keywords(const Json& s, const std::string& path) const;
  std::vector<std::string> types_of(const Json& s, const std::string& path) const;
  int count(const Json& s, const char* key, const std::string& path, int fallback) const;
  const Json& resolve(const std::string& pointer, const std::string& path) const;
  [[noreturn]] void fail(const std::string& keyword, const std::string& path, const std::string& why) const;

  const Json& root_;
  SchemaOptions options_;
  GrammarBuilder b_;
  JsonGrammar json_;
  std::map<std::string, int32_t> ref_rules_;  // $ref target -> its rule (recursion)
};

// Whether the keyword is an annotation (ignored) or a container read only through $ref.
bool is_annotation_keyword(const std::string& key);

}  // namespace flashserve::structured
