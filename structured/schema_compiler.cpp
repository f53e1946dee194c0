// JSON Schema -> grammar: keyword checks, the choice of type, $ref (recursive ones become rule
// cycles), enum/const, anyOf/oneOf and allOf (merged into one schema before compiling).
#include "structured/schema_compiler.h"

#include <cmath>
#include <algorithm>
#include <optional>

#include "core/json_text.h"
#include "structured/schema_compiler_impl.h"
#include "structured/schema_error.h"
#include "structured/schema_validator.h"

namespace flashserve::structured {

namespace {

// A JSON pointer's first segment, unescaped (~1 is '/', ~0 is '~').
std::string unescape_segment(const std::string& rest) {
  const std::string seg = rest.substr(0, rest.find('/'));
  std::string out;
  for (size_t i = 0; i < seg.size(); ++i) {
    if (seg[i] == '~' && i + 1 < seg.size()) {
      out += seg[i + 1] == '1' ? '/' : '~';
      ++i;
    } else {
      out += seg[i];
    }
  }
  return out;
}

std::string child(const std::string& path, const std::string& key) { return pointer_child(path, key); }

// The keywords of JSON Schema (drafts 3 to 2020-12) that constrain a value, and the annotations
// that JSON Schema and OpenAPI define. Any other key is unknown: ignored, and reported.
const std::set<std::string>& enforced_keywords() {
  static const std::set<std::string> k{
      "type", "properties", "required", "additionalProperties", "items", "prefixItems",
      "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref",
      "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
      "exclusiveMinimum", "exclusiveMaximum", "additionalItems", "uniqueItems", "patternProperties",
      "minProperties", "maxProperties", "multipleOf", "propertyNames", "dependentRequired",
      "dependencies", "dependentSchemas", "not"};
  return k;
}

const std::set<std::string>& unenforced_keywords() {
  static const std::set<std::string> k{
      "if", "then", "else",
      "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
      "$dynamicRef", "$recursiveRef", "disallow", "extends", "divisibleBy"};
  return k;
}

const std::set<std::string>& annotation_keywords() {
  // nullable (OpenAPI 3.0) is listed for the checks beside $ref, enum and anyOf; types_of gives
  // it its meaning. $defs and definitions are read only through $ref.
  static const std::set<std::string> k{
      "title", "description", "examples", "$comment", "default", "$schema", "$id", "id", "$anchor",
      "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "deprecated", "readOnly", "writeOnly",
      "$defs", "definitions", "contentMediaType", "contentEncoding", "contentSchema", "example",
      "discriminator", "xml", "externalDocs", "nullable"};
  return k;
}

Json parse_schema(std::string_view text, const SchemaOptions& o) {
  if (text.size() > o.limits.max_schema_bytes)
    throw SchemaError("schema", "", str_cat("the schema is larger than ", o.limits.max_schema_bytes, " bytes"));
  if (json_nesting_depth(text) > 2 * o.limits.max_depth)
    throw SchemaError("schema", "", str_cat("the schema nests deeper than ", 2 * o.limits.max_depth, " levels"));
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    throw SchemaError("schema", "", str_cat("not valid JSON: ", e.what()));
  }
}

// Both schemas at once, as a schema: an allOf of the two (flattened), or one of them when the
// other is true or they are equal.
Json both(const Json& a, const Json& b) {
  if (a == b || b == true) return a;
  if (a == true) return b;
  Json list = Json::array();
  for (const Json* x : {&a, &b}) {
    if (x->is_object() && x->size() == 1 && x->contains("allOf") && (*x)["allOf"].is_array())
      for (const Json& y : (*x)["allOf"]) list.push_back(y);
    else list.push_back(*x);
  }
  return Json{{"allOf", list}};
}

// One keyword's values from two allOf branches, as one value both hold under; nullopt where no
// single value says it (two different patterns, consts or formats).
std::optional<Json> intersect_keyword(const std::string& k, const Json& a, const Json& b) {
  static const std::set<std::string> lower{"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"};
  static const std::set<std::string> upper{"maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"};
  if ((lower.count(k) || upper.count(k)) && a.is_number() && b.is_number())
    return lower.count(k) ? (a.get<double>() >= b.get<double>() ? a : b) : (a.get<double>() <= b.get<double>() ? a : b);
  if (k == "type") {
    auto list = [](const Json& t) { return t.is_array() ? t : Json::array({t}); };
    Json out = Json::array();
    for (const Json& x : list(a))
      for (const Json& y : list(b)) {
        Json t = x == y ? x : (x == "integer" && y == "number") || (x == "number" && y == "integer") ? Json("integer") : Json();
        if (!t.is_null() && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
      }
    if (out.empty()) return std::nullopt;
    return out.size() == 1 ? out[0] : out;
  }
  if (k == "enum" && a.is_array() && b.is_array()) {
    Json out = Json::array();
    for (const Json& x : a)
      if (std::find(b.begin(), b.end(), x) != b.end()) out.push_back(x);
    return out;
  }
  if (k == "uniqueItems" && a.is_boolean() && b.is_boolean()) return Json(a.get<bool>() || b.get<bool>());
  if (k == "items" || k == "additionalProperties" || k == "additionalItems" || k == "propertyNames" ||
      k == "contains" || k == "unevaluatedProperties")
    return both(a, b);
  if (k == "not") return Json{{"anyOf", Json::array({a, b})}};
  return std::nullopt;
}

}  // namespace

bool value_has_type(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

KeywordKind keyword_kind(const std::string& key) {
  if (enforced_keywords().count(key)) return KeywordKind::kEnforced;
  if (unenforced_keywords().count(key)) return KeywordKind::kUnenforced;
  if (annotation_keywords().count(key) || key.rfind("x-", 0) == 0) return KeywordKind::kAnnotation;
  return KeywordKind::kUnknown;
}

SchemaCompiler::SchemaCompiler(const Json& root, const SchemaOptions& options)
    : root_(root), options_(options), b_(options.limits.max_grammar_elements), json_(b_, options.whitespace) {}

void SchemaCompiler::fail(const std::string& keyword, const std::string& path, const std::string& why) const {
  throw SchemaError(keyword, path, why);
}

Grammar SchemaCompiler::compile(std::string_view prefix, std::string_view suffix) {
  Sym top = schema(root_, "", 0);
  Seq seq = b_.literal(prefix);
  seq.push_back(top);
  for (Sym s : b_.literal(suffix)) seq.push_back(s);
  return b_.build(b_.rule_of({seq}));
}

Grammar SchemaCompiler::compile_branches(const std::vector<std::string>& prefixes,
                                         std::string_view suffix) {
  const Json* any = root_.is_object() && root_.contains("anyOf") ? &root_["anyOf"] : nullptr;
  if (any == nullptr || !any->is_array() || any->size() != prefixes.size()) {
    fail("anyOf", "", "needs one schema per prefix");
  }
  std::vector<Seq> alts;
  for (size_t i = 0; i < prefixes.size(); ++i) {
    Seq seq = b_.literal(prefixes[i]);
    seq.push_back(schema((*any)[i], "/anyOf/" + std::to_string(i), 1));
    for (Sym s : b_.literal(suffix)) seq.push_back(s);
    alts.push_back(std::move(seq));
  }
  return b_.build(b_.rule_of(alts));
}

const Json& SchemaCompiler::checked(const Json& s, const std::string& path, Json& storage) {
  const Json* out = &s;
  for (const auto& [key, value] : s.items()) {
    const KeywordKind kind = keyword_kind(key);
    if (kind == KeywordKind::kUnknown) note_unknown(key, child(path, key));
    // then/else without if have no effect (JSON Schema's reading).
    const bool inert = (key == "then" || key == "else") && !s.contains("if");
    if (kind != KeywordKind::kUnenforced || inert) continue;
    if (options_.strict)
      fail(key, child(path, key), "this keyword is not enforced (docs/STRUCTURED_OUTPUTS.md lists the subset)");
    if (out == &s) {
      storage = s;
      out = &storage;
    }
    storage.erase(key);
    report_.dropped.push_back({key, child(path, key), "the grammar does not enforce this keyword"});
  }
  return *out;
}

void SchemaCompiler::undo_refs(size_t n) {
  while (ref_log_.size() > n) {
    ref_rules_.erase(ref_log_.back());
    ref_log_.pop_back();
  }
}

void SchemaCompiler::note_unknown(const std::string& what, const std::string& path) {
  if (unknown_seen_.insert(what).second) report_.unknown.emplace_back(what, path);
}

Sym SchemaCompiler::schema(const Json& s, const std::string& path, int depth) {
  if (options_.strict || !s.is_object()) return exact(s, path, depth);
  Json pruned;  // s less the keywords dropped so far
  const Json* current = &s;
  for (;;) {
    const size_t refs = ref_log_.size(), drops = report_.dropped.size();
    try {
      return exact(*current, path, depth);
    } catch (const SchemaError& e) {
      // The keyword of this subschema the error lies under (a deeper subschema's own call
      // dropped what it could). The schema's size and depth limits drop nothing.
      if (e.keyword() == "schema") throw;
      // Inside an anyOf alternative, a part that admits no value rules out the alternative (the
      // anyOf leaves it out: tighter) rather than being dropped.
      if (e.unsatisfiable() && any_of_depth_ > 0) throw;
      std::string key;
      if (e.path() == path) key = e.keyword();
      else if (e.path().rfind(path + "/", 0) == 0) key = unescape_segment(e.path().substr(path.size() + 1));
      if (key.empty() || !current->contains(key)) throw;
      // Undo what the failed attempt recorded: its $ref rules may be unfinished.
      undo_refs(refs);
      report_.dropped.resize(drops);
      if (current == &s) {
        pruned = s;
        current = &pruned;
      }
      pruned.erase(key);
      report_.dropped.push_back({key, child(path, key), e.what()});
    }
  }
}

Sym SchemaCompiler::exact(const Json& schema_json, const std::string& path, int depth) {
  if (depth > options_.limits.max_depth)
    fail("schema", path, str_cat("subschemas nest deeper than ", options_.limits.max_depth));
  b_.set_context("schema", path);
  if (schema_json.is_boolean()) {
    if (!schema_json.get<bool>()) throw SchemaError("false", path, "the schema false admits no value", true);
    return json_.value();
  }
  if (!schema_json.is_object()) fail("schema", path, "a schema must be an object or a boolean");
  Json storage;
  const Json& s = checked(schema_json, path, storage);
  if (s.contains("$ref")) return ref(s, path, depth);
  if (s.contains("allOf")) return schema(merge_all_of(s, path, depth), path, depth + 1);
  if (s.contains("not")) return schema(without_not(s, path), path, depth + 1);
  if (s.contains("dependentRequired") || s.contains("dependencies") || s.contains("dependentSchemas"))
    return schema(dependencies_as_alternatives(s, path), path, depth + 1);
  if (s.contains("enum") || s.contains("const")) return literal_choices(s, path);
  if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, path, depth);
  std::vector<std::string> types = types_of(s, path);
  if (types.empty()) return json_.value();
  std::vector<Seq> alts;
  for (const std::string& t : types) alts.push_back({typed(s, t, path, depth)});
  return alts.size() == 1 ? alts[0][0] : GrammarBuilder::rule(b_.rule_of(alts));
}

std::vector<std::string> SchemaCompiler::types_of(const Json& s, const std::string& path) const {
  static const std::set<std::string> known{"object", "array", "string", "number", "integer", "boolean", "null"};
  std::vector<std::string> types;
  if (s.contains("type")) {
    const Json& t = s["type"];
    if (t.is_string()) types.push_back(t.get<std::string>());
    else if (t.is_array())
      for (const Json& x : t) {
        if (!x.is_string()) fail("type", child(path, "type"), "type names must be strings");
        types.push_back(x.get<std::string>());
      }
    else fail("type", child(path, "type"), "must be a string or an array of strings");
    for (const std::string& x : types)
      if (!known.count(x)) fail("type", child(path, "type"), str_cat("unknown type '", x, "'"));
    if (types.empty()) throw SchemaError("type", child(path, "type"), "an empty list of types admits no value", true);
    // OpenAPI 3.0: nullable adds null to the types given beside it (and only then).
    if (s.contains("nullable") && s["nullable"] == true && std::find(types.begin(), types.end(), "null") == types.end())
      types.push_back("null");
    return types;
  }
  // No type: the keywords present say which one is meant (tighter than JSON Schema, which would
  // let values of other types through; any generated value is still valid).
  auto has = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys) if (s.contains(k)) return true;
    return false;
  };
  if (has({"properties", "required", "additionalProperties", "patternProperties", "minProperties",
           "maxProperties", "propertyNames"}))
    types.push_back("object");
  if (has({"items", "prefixItems", "minItems", "maxItems"})) types.push_back("array");
  if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
  if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) types.push_back("number");
  return types;
}

const Json& SchemaCompiler::resolve(const std::string& pointer, const std::string& path) const {
  if (pointer.empty() || pointer[0] != '#')
    fail("$ref", path, str_cat("only local references (#/...) are supported, not '", pointer, "'"));
  try {
    return root_.at(Json::json_pointer(pointer.substr(1)));
  } catch (const Json::exception&) {
    fail("$ref", path, str_cat("'", pointer, "' does not point into the schema"));
  }
}

Sym SchemaCompiler::ref(const Json& s, const std::string& path, int depth) {
  const std::string ref_path = child(path, "$ref");
  for (const auto& [key, value] : s.items())
    if (key != "$ref" && !ignorable(key)) {
      // Other keywords beside $ref apply too: {"allOf": [{"$ref"}, the rest]}.
      Json rest = s;
      rest.erase("$ref");
      Json merged = {{"allOf", Json::array({Json{{"$ref", s["$ref"]}}, rest})}};
      return schema(merge_all_of(merged, path, depth), path, depth + 1);
    }
  if (!s["$ref"].is_string()) fail("$ref", ref_path, "must be a string");
  const std::string pointer = s["$ref"].get<std::string>();
  auto it = ref_rules_.find(pointer);
  if (it != ref_rules_.end()) return GrammarBuilder::rule(it->second);
  // The rule exists before its body is compiled, so a recursive reference finds it.
  int32_t rule = b_.new_rule();
  ref_rules_[pointer] = rule;
  ref_log_.push_back(pointer);
  const Json& target = resolve(pointer, ref_path);
  Sym body = schema(target, pointer.substr(1), depth + 1);
  b_.add_alt(rule, {body});
  return GrammarBuilder::rule(rule);
}

Json SchemaCompiler::without_not(const Json& s, const std::string& path) {
  const std::string not_path = child(path, "not");
  Json n = s["not"];
  for (int hops = 0; n.is_object() && n.contains("$ref"); ++hops) {
    if (hops > options_.limits.max_depth) fail("$ref", not_path, "a chain of references that does not end");
    n = resolve(n["$ref"].get<std::string>(), not_path);
  }
  Json out = s;
  out.erase("not");
  if (n == false) return out;
  if (!n.is_object()) fail("not", not_path, "must be a schema");
  Json core = Json::object();
  for (const auto& [k, v] : n.items())
    if (!ignorable(k)) core[k] = v;
  if (core.empty()) fail("not", not_path, "not of any value admits no value");
  if (core.size() == 1 && core.contains("type")) {
    // The types left once the refused ones are removed (number also removes integer).
    static const std::vector<std::string> kAll{"object", "array", "string", "number", "integer", "boolean", "null"};
    std::vector<std::string> types = types_of(out, path);
    if (types.empty()) types = kAll;
    const std::vector<std::string> refused = types_of(core, not_path);
    auto is_refused = [&](const std::string& t) {
      return std::find(refused.begin(), refused.end(), t) != refused.end() ||
             (t == "integer" && std::find(refused.begin(), refused.end(), "number") != refused.end());
    };
    Json left = Json::array();
    for (const std::string& t : types) {
      if (t == "number" && is_refused("integer") && !is_refused("number"))
        fail("not", not_path, "numbers that are not integers are not supported");
      if (!is_refused(t)) left.push_back(t);
    }
    if (left.empty()) throw SchemaError("not", not_path, "every type is refused", true);
    out["type"] = left;
    if (is_refused("null")) out.erase("nullable");
    return out;
  }
  if ((out.contains("enum") || out.contains("const")) && (core.contains("enum") || core.contains("const"))) {
    // The listed values, less those the refused schema matches (allowed_values checks `not`).
    Json values = Json::array();
    for (const Json& v : allowed_values(s, path)) values.push_back(v);
    out.erase("const");
    out["enum"] = values;
    return out;
  }
  fail("not", not_path, "only not on a type, or on enum/const beside an enum, is enforced");
}

Json SchemaCompiler::dependencies_as_alternatives(const Json& s, const std::string& path) {
  struct Dependency {
    std::string name;
    Json needs;  // an array of names, or a schema
  };
  std::vector<Dependency> deps;
  Json out = s;
  for (const char* key : {"dependentRequired", "dependencies", "dependentSchemas"}) {
    if (!s.contains(key)) continue;
    out.erase(key);
    if (!s[key].is_object()) fail(key, child(path, key), "must be an object");
    for (const auto& [name, needs] : s[key].items()) deps.push_back({name, needs});
    if (deps.size() > 4) fail(key, child(path, key), "more than 4 dependencies (each doubles the object's grammar)");
  }
  // Per dependency, two alternatives: the property absent, or present with what it needs.
  std::vector<Json> alts{out};
  for (const Dependency& d : deps) {
    std::vector<Json> next;
    for (const Json& a : alts) {
      const bool required = a.contains("required") && a["required"].is_array() &&
                            std::find(a["required"].begin(), a["required"].end(), d.name) != a["required"].end();
      if (!required) {
        Json absent = a;
        absent["properties"][d.name] = false;
        next.push_back(absent);
      }
      Json present = a;
      if (!present.contains("required")) present["required"] = Json::array();
      present["required"].push_back(d.name);
      if (d.needs.is_array()) {
        for (const Json& r : d.needs) present["required"].push_back(r);
        next.push_back(present);
      } else {
        next.push_back(Json{{"allOf", Json::array({present, d.needs})}});
      }
    }
    // An alternative that requires a property another one left out admits no object.
    alts.clear();
    for (Json& a : next) {
      const Json& base = a.contains("allOf") ? a["allOf"][0] : a;
      bool ok = true;
      if (base.contains("required") && base.contains("properties"))
        for (const Json& r : base["required"])
          ok = ok && !(r.is_string() && base["properties"].contains(r.get<std::string>()) &&
                       base["properties"][r.get<std::string>()] == false);
      if (ok) alts.push_back(std::move(a));
    }
  }
  if (alts.empty()) fail("dependentRequired", path, "the dependencies leave no object");
  return Json{{"anyOf", alts}};
}

std::vector<Json> SchemaCompiler::allowed_values(const Json& s, const std::string& path) {
  const std::string key = s.contains("const") ? "const" : "enum";
  Json values = Json::array();
  if (key == "const") values.push_back(s["const"]);
  else if (s["enum"].is_array()) values = s["enum"];
  else fail("enum", child(path, key), "must be an array");
  if (values.size() > options_.limits.max_enum)
    fail(key, child(path, key), str_cat("more than ", options_.limits.max_enum, " values"));
  // Keywords beside the values (type, format, maxLength, not, ...) keep those that satisfy them,
  // as the validator reads them: the grammar then lists exactly the valid values.
  Json rest = Json::object();
  for (const auto& [k, v] : s.items())
    if (k != "enum" && k != "const" && !ignorable(k)) rest[k] = v;
  if (rest.contains("type")) types_of(s, path);  // checks the type names
  std::optional<SchemaValidator> validator;
  if (!rest.empty()) validator.emplace(rest.dump());
  std::vector<Json> kept;  // distinct (1 and 1.0 are equal)
  for (const Json& v : values)
    if ((!validator || !validator->validate(v.dump())) && std::find(kept.begin(), kept.end(), v) == kept.end())
      kept.push_back(v);
  if (kept.empty())
    throw SchemaError(key, child(path, key), "no value is allowed (an empty enum, or none fits the keywords beside it)", true);
  return kept;
}

Sym SchemaCompiler::literal_choices(const Json& s, const std::string& path) {
  std::vector<Seq> alts;
  for (const Json& v : allowed_values(s, path)) alts.push_back(b_.literal(v.dump()));
  return GrammarBuilder::rule(b_.rule_of(alts));
}

Sym SchemaCompiler::any_of(const Json& s, const std::string& path, int depth) {
  const std::string key = s.contains("anyOf") ? "anyOf" : "oneOf";
  // Keywords beside the list apply to every branch: each branch becomes {"allOf": [rest, branch]}.
  Json rest = Json::object();
  for (const auto& [k, value] : s.items())
    if (k != key && !ignorable(k)) rest[k] = value;
  if (rest.contains("anyOf") || rest.contains("oneOf"))
    fail(rest.contains("anyOf") ? "anyOf" : "oneOf", path, "anyOf and oneOf together are not supported");
  const Json& list = s[key];
  if (!list.is_array() || list.empty()) fail(key, child(path, key), "must be a non-empty array");
  std::vector<Seq> alts;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].is_boolean() && !list[i].get<bool>()) continue;  // false: never matches
    const std::string branch_path = child(child(path, key), std::to_string(i));
    const size_t refs = ref_log_.size(), drops = report_.dropped.size();
    ++any_of_depth_;
    try {
      if (rest.empty()) {
        alts.push_back({schema(list[i], branch_path, depth + 1)});
      } else {
        const Json both = {{"allOf", Json::array({rest, list[i]})}};
        alts.push_back({schema(merge_all_of(both, branch_path, depth + 1), branch_path, depth + 1)});
      }
      --any_of_depth_;
    } catch (const SchemaError& e) {
      --any_of_depth_;
      // An alternative that admits no value (types that do not meet) never matches: left out.
      if (!e.unsatisfiable()) throw;
      undo_refs(refs);
      report_.dropped.resize(drops);
    }
  }
  if (alts.empty()) throw SchemaError(key, child(path, key), "no alternative admits a value", true);
  return GrammarBuilder::rule(b_.rule_of(alts));
}

Json SchemaCompiler::merge_all_of(const Json& s, const std::string& path, int depth) {
  const std::string key_path = child(path, "allOf");
  const Json& list = s["allOf"];
  if (!list.is_array() || list.empty()) fail("allOf", key_path, "must be a non-empty array");
  // The merged schema starts as s without allOf; each branch (its $ref resolved) adds to it.
  Json merged = s;
  merged.erase("allOf");
  Json alternatives = Json::object();
  for (const char* k : {"anyOf", "oneOf"})
    if (merged.contains(k)) {
      if (alternatives.contains("list")) fail("oneOf", path, "anyOf and oneOf together are not supported");
      alternatives = {{"key", k}, {"list", merged[k]}};
      merged.erase(k);
    }
  std::vector<Json> branches{merged};
  for (size_t i = 0; i < list.size(); ++i) {
    Json branch = list[i];
    const std::string bpath = child(key_path, std::to_string(i));
    for (int hops = 0; branch.is_object() && branch.contains("$ref"); ++hops) {
      if (hops > options_.limits.max_depth) fail("$ref", bpath, "a chain of references that does not end");
      branch = resolve(branch["$ref"].get<std::string>(), bpath);
    }
    if (branch.is_boolean() && branch.get<bool>()) continue;
    if (!branch.is_object()) fail("allOf", bpath, "each branch must be an object schema");
    if (branch.contains("allOf")) branch = merge_all_of(branch, bpath, depth + 1);
    // A branch's anyOf/oneOf moves to the merged schema, whose other keywords any_of merges into
    // each alternative: X and (A or B) is (X and A) or (X and B). One such list at most.
    Json storage;
    Json checked_branch = checked(branch, bpath, storage);
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!checked_branch.contains(k)) continue;
      if (!checked_branch[k].is_array()) fail(k, child(bpath, k), "must be a non-empty array");
      if (!alternatives.contains("list")) {
        alternatives = {{"key", k}, {"list", checked_branch[k]}};
      } else {
        // Two lists: every pair of their alternatives (oneOf is read as anyOf).
        Json pairs = Json::array();
        for (const Json& x : alternatives["list"])
          for (const Json& y : checked_branch[k]) pairs.push_back(Json{{"allOf", Json::array({x, y})}});
        if (pairs.size() > 64) fail("allOf", bpath, "more than 64 combinations of anyOf/oneOf alternatives");
        alternatives = {{"key", "anyOf"}, {"list", pairs}};
      }
      checked_branch.erase(k);
    }
    branches.push_back(std::move(checked_branch));
  }
  merged = Json::object();
  Json properties = Json::object();
  std::vector<std::string> required;
  bool closed = false;  // some branch has additionalProperties false
  for (const Json& br : branches) {
    for (const auto& [k, v] : br.items()) {
      if (k == "properties") {
        for (const auto& [name, sub] : v.items())  // a property in several branches meets all
          properties[name] = properties.contains(name) ? both(properties[name], sub) : sub;
      } else if (k == "required") {
        for (const Json& r : v) required.push_back(r.get<std::string>());
      } else if (k == "additionalProperties" && v.is_boolean() && !v.get<bool>()) {
        closed = true;
      } else if (merged.contains(k) && merged[k] != v && !ignorable(k)) {
        std::optional<Json> met = intersect_keyword(k, merged[k], v);
        if (!met && k == "type") throw SchemaError("allOf", key_path, "the branches have no type in common", true);
        if (!met) fail("allOf", key_path, str_cat("'", k, "' differs between branches"));
        merged[k] = std::move(*met);
      } else {
        merged[k] = v;
      }
    }
  }
  // A branch's additionalProperties schema also governs the properties other branches declare
  // and it does not.
  for (const Json& br : branches) {
    if (!br.contains("additionalProperties") || !br["additionalProperties"].is_object()) continue;
    for (auto& [name, sub] : properties.items())
      if (!(br.contains("properties") && br["properties"].contains(name))) sub = both(sub, br["additionalProperties"]);
  }
  if (closed) {
    // A property one closed branch does not declare can never appear.
    for (const Json& br : branches) {
      if (!(br.contains("additionalProperties") && br["additionalProperties"] == false)) continue;
      Json kept = Json::object();
      for (const auto& [name, sub] : properties.items())
        if (br.contains("properties") && br["properties"].contains(name)) kept[name] = sub;
      properties = kept;
    }
    merged["additionalProperties"] = false;
  }
  // OpenAPI 3.0's nullable applies to the type beside it only, not to another branch's type.
  if (merged.contains("nullable") &&
      std::none_of(branches.begin(), branches.end(), [](const Json& br) { return br.contains("nullable") && br.contains("type"); }))
    merged.erase("nullable");
  if (!properties.empty()) merged["properties"] = properties;
  if (!required.empty()) merged["required"] = required;
  if (alternatives.contains("list")) merged[alternatives["key"].get<std::string>()] = alternatives["list"];
  return merged;
}

Grammar compile_json_schema(std::string_view schema_text, const SchemaOptions& options, SchemaReport* report) {
  return compile_json_schema_between("", schema_text, "", options, report);
}

Grammar compile_json_schema_between(std::string_view prefix, std::string_view schema_text,
                                    std::string_view suffix, const SchemaOptions& options, SchemaReport* report) {
  Json root = parse_schema(schema_text, options);
  SchemaCompiler compiler(root, options);
  Grammar g = compiler.compile(prefix, suffix);
  if (report != nullptr) *report = compiler.report();
  return g;
}

Grammar compile_json_schema_branches(const std::vector<std::string>& prefixes,
                                     std::string_view schema_text, std::string_view suffix,
                                     const SchemaOptions& options, SchemaReport* report) {
  Json root = parse_schema(schema_text, options);
  SchemaCompiler compiler(root, options);
  Grammar g = compiler.compile_branches(prefixes, suffix);
  if (report != nullptr) *report = compiler.report();
  return g;
}

std::string canonical_schema_text(std::string_view schema_text, const SchemaOptions& options) {
  return parse_schema(schema_text, options).dump();
}

}  // namespace flashserve::structured
