// The schema compiler's per-type rules: objects (properties in schema order, optional ones
// skippable, extra keys after them, patternProperties), arrays (prefixItems, draft 4-7 tuples,
// items, counts, uniqueItems), strings (lengths, pattern, format) and numbers (bounds).
#include <algorithm>
#include <cmath>
#include <functional>
#include <regex>

#include "structured/number_range.h"
#include "structured/regex_compiler.h"
#include "structured/regex_product.h"
#include "structured/schema_compiler_impl.h"
#include "structured/schema_error.h"
#include "structured/schema_validator.h"

namespace flashserve::structured {

namespace {

std::string subpath(const std::string& path, const std::string& key) { return path + "/" + key; }

// The format regexes: tighter than RFC 3339 where that keeps every output valid (no February 29, no year 0000,
// no leap seconds).
const char* format_regex(const std::string& format) {
  if (format == "date")
    return "^([1-9][0-9]{3}|0([1-9][0-9]{2}|0[1-9][0-9]|00[1-9]))-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
           "02-(0[1-9]|1[0-9]|2[0-8]))$";
  if (format == "time") return "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";
  if (format == "date-time")
    return "^([1-9][0-9]{3}|0([1-9][0-9]{2}|0[1-9][0-9]|00[1-9]))-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
           "02-(0[1-9]|1[0-9]|2[0-8]))T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
           "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";
  // uri (also a valid uri-reference and uri-template): http(s), a host name, a path, a query.
  if (format == "uri" || format == "uri-reference" || format == "uri-template" || format == "iri" || format == "iri-reference")
    return "^https?://[a-z0-9]+(-[a-z0-9]+)*(\\.[a-z0-9]+(-[a-z0-9]+)*)*(:[1-9][0-9]{0,3})?(/[A-Za-z0-9._~-]+)*/?"
           "(\\?[A-Za-z0-9._~-]+=[A-Za-z0-9._~-]*(&[A-Za-z0-9._~-]+=[A-Za-z0-9._~-]*)*)?$";
  if (format == "ipv4") return "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$";
  if (format == "ipv6") return "^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$";  // the full form: eight groups
  // At most four labels of 1-63 characters (within the 253 allowed); the last starts with a letter.
  if (format == "hostname" || format == "idn-hostname")
    return "^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\\.){0,3}[a-z]([a-z0-9-]{0,61}[a-z0-9])?$";
  if (format == "uuid") return "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
  if (format == "email" || format == "idn-email")
    return "^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9]+(-[A-Za-z0-9]+)*(\\.[A-Za-z0-9]+(-[A-Za-z0-9]+)*)+$";
  // A day count or a time of day's parts: a subset of ISO 8601 durations.
  if (format == "duration") return "^P([0-9]{1,4}D|T[0-9]{1,4}H([0-9]{1,4}M)?|T[0-9]{1,4}M|T[0-9]{1,4}S)$";
  if (format == "json-pointer") return "^(/([^~/]|~[01])*)*$";
  if (format == "relative-json-pointer") return "^(0|[1-9][0-9]{0,3})(#|(/([^~/]|~[01])*)*)$";
  // Letters, digits and spaces: always a valid regex that matches itself.
  if (format == "regex") return "^[A-Za-z0-9 ]*$";
  return nullptr;
}

// The formats JSON Schema defines. Others (OpenAPI's int64, byte, binary, password; vendors'
// google-datetime, ...) are annotations under the specification: a plain string is generated
// and the format is reported with the unknown keywords.
bool spec_format(const std::string& format) {
  static const std::set<std::string> k{
      "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname",
      "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template",
      "json-pointer", "relative-json-pointer", "regex"};
  return k.count(format) > 0;
}

// Whether the node is the any-text that search semantics puts around an unanchored pattern.
bool is_any_text(const RegexAst& ast, int32_t id) {
  const RegexNode& n = ast.nodes[id];
  if (n.kind != RegexNode::Kind::kRepeat || n.min != 0 || n.max >= 0) return false;
  const RegexNode& c = ast.nodes[n.kids[0]];
  return c.kind == RegexNode::Kind::kChars && c.set.ranges() == CharSet::any().ranges();
}

// Concatenates sequences.
Seq cat(std::initializer_list<Seq> parts) {
  Seq out;
  for (const Seq& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

int SchemaCompiler::count(const Json& s, const char* key, const std::string& path, int fallback) const {
  if (!s.contains(key)) return fallback;
  const Json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    fail(key, subpath(path, key), "must be a non-negative integer");
  int64_t n = v.get<int64_t>();
  const int cap = options_.limits.max_repeat;
  if (std::string(key).rfind("max", 0) == 0) return static_cast<int>(std::min<int64_t>(n, cap));  // capped: tighter
  if (n > cap) fail(key, subpath(path, key), str_cat("larger than the limit of ", cap));
  return static_cast<int>(n);
}

Sym SchemaCompiler::typed(const Json& s, const std::string& type, const std::string& path, int depth) {
  if (type == "object") return object(s, path, depth);
  if (type == "array") return array(s, path, depth);
  if (type == "string") return string(s, path);
  if (type == "number" || type == "integer") return numeric(s, type == "integer", path);
  if (type == "boolean") return json_.boolean();
  return json_.null();
}

Sym SchemaCompiler::object(const Json& s, const std::string& path, int depth) {
  struct Prop {
    std::string name;
    const Json* schema;
    bool required;
  };
  static const Json kTrue = true;
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) fail("required", subpath(path, "required"), "must be an array of names");
    for (const Json& r : s["required"]) {
      if (!r.is_string()) fail("required", subpath(path, "required"), "must be an array of names");
      required.insert(r.get<std::string>());
    }
  }
  // additionalProperties absent is taken as false: no key outside `properties` is generated.
  const Json* extra = nullptr;
  if (s.contains("additionalProperties") && s["additionalProperties"] != false) extra = &s["additionalProperties"];
  std::vector<Prop> props;
  std::set<std::string> declared;
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) fail("properties", subpath(path, "properties"), "must be an object");
    for (const auto& [name, sub] : s["properties"].items()) declared.insert(name);
  }
  // patternProperties: the extra keys are those of its pattern with its schema (additionalProperties
  // then adds none: tighter, as every generated key is one the pattern governs).
  const auto [key_regex, key_schema] = key_pattern(s, declared, path);
  if (key_schema != nullptr) extra = key_schema;
  // propertyNames: a declared property whose name it refuses is never written.
  std::optional<SchemaValidator> names;
  if (s.contains("propertyNames")) names.emplace(Json(s["propertyNames"]).dump());
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) fail("properties", subpath(path, "properties"), "must be an object");
    for (const auto& [name, sub] : s["properties"].items()) {
      declared.insert(name);
      bool req = required.count(name) > 0;
      if (sub == false || (names && names->validate(Json(name).dump()))) {
        if (req) fail("required", subpath(path, "required"), str_cat("'", name, "' is required but its schema is false"));
        continue;
      }
      props.push_back({name, &sub, req});
    }
  }
  for (const std::string& name : required) {
    if (names && names->validate(Json(name).dump()))
      fail("required", subpath(path, "required"), str_cat("'", name, "' is required but propertyNames refuses it"));
    if (declared.count(name)) continue;
    if (s.contains("additionalProperties") && s["additionalProperties"] == false)
      fail("required", subpath(path, "required"), str_cat("'", name, "' is required but additionalProperties is false"));
    if (key_schema != nullptr) fail("required", subpath(path, "required"), str_cat("'", name, "' is required beside patternProperties"));
    props.push_back({name, extra ? extra : &kTrue, true});
  }
  // Keys of extra properties under propertyNames: an enum/const lists them (less the declared
  // names); other forms apply when no property is declared (a key could otherwise repeat one).
  std::optional<Sym> named_key;
  if (s.contains("propertyNames") && extra != nullptr) {
    const Json& pn = s["propertyNames"];
    const std::string pn_path = subpath(path, "propertyNames");
    if (pn.is_object() && (pn.contains("enum") || pn.contains("const"))) {
      std::vector<Seq> names;
      for (const Json& v : allowed_values(pn, pn_path))
        if (v.is_string() && !declared.count(v.get<std::string>())) names.push_back(b_.literal(v.dump()));
      if (names.empty()) extra = nullptr;
      else named_key = GrammarBuilder::rule(b_.rule_of(names));
    } else if (key_schema != nullptr || !declared.empty()) {
      fail("propertyNames", pn_path, "a key pattern beside declared properties or patternProperties is not supported");
    } else {
      Json key = pn.is_object() ? pn : Json::object();
      key["type"] = "string";
      named_key = schema(key, pn_path, depth + 1);
    }
  }
  // Tail rules, built back to front. node[i][c]: properties i.. with c written so far (c = 0:
  // the next one has no comma). c counts up to k, past which min/maxProperties no longer care.
  const int min_props = count(s, "minProperties", path, 0);
  const int max_props = count(s, "maxProperties", path, -1);
  const int k = std::max(1, max_props >= 0 ? max_props : min_props);
  auto next_count = [&](int c) { return std::min(c + 1, k); };
  std::vector<Sym> member(props.size());
  for (size_t i = 0; i < props.size(); ++i) {
    Seq key = b_.literal(Json(props[i].name).dump());
    member[i] = GrammarBuilder::rule(b_.rule_of({cat({key, json_.colon(), {schema(*props[i].schema,
                                    subpath(subpath(path, "properties"), props[i].name), depth + 1)}})}));
  }
  // After the declared properties: extra pairs, as many as the counts still allow (-1: none fit).
  std::vector<int32_t> tail(k + 1, -1);
  {
    std::optional<Sym> pair;
    if (extra != nullptr) {
      const std::string extra_path = key_schema ? subpath(subpath(path, "patternProperties"), key_regex) : subpath(path, "additionalProperties");
      Sym value = schema(*extra, extra_path, depth + 1);
      Sym key = named_key ? *named_key : key_schema ? regex_string(key_regex, "patternProperties", extra_path) : extra_key(declared);
      pair = GrammarBuilder::rule(b_.rule_of({cat({{key}, json_.colon(), {value}})}));
    }
    for (int c = 0; c <= k; ++c) {
      const int lo = std::max(min_props - c, 0);
      const int hi = max_props < 0 ? -1 : max_props - c;
      if (!pair) {
        if (lo == 0) tail[c] = b_.rule_of({{}});
        continue;
      }
      if (hi >= 0 && hi < lo) continue;
      const Seq sep_pair = cat({json_.comma(), {*pair}});
      if (c > 0) {
        tail[c] = b_.rule_of({{b_.repeat(sep_pair, lo, hi)}});
      } else if (hi == 0) {
        tail[c] = b_.rule_of({{}});
      } else {
        Seq run{*pair, b_.repeat(sep_pair, std::max(lo - 1, 0), hi < 0 ? -1 : hi - 1)};
        tail[c] = lo > 0 ? b_.rule_of({run}) : b_.rule_of({{b_.optional(run)}});
      }
    }
  }
  std::vector<int32_t> next = tail;  // node[i + 1]; -1: no way to finish from there
  for (size_t i = props.size(); i-- > 0;) {
    std::vector<int32_t> cur(k + 1, -1);
    for (int c = 0; c <= k; ++c) {
      std::vector<Seq> alts;
      const bool room = max_props < 0 || c < max_props;
      if (room && next[next_count(c)] >= 0) {
        Seq write = c == 0 ? Seq{member[i]} : cat({json_.comma(), {member[i]}});
        write.push_back(GrammarBuilder::rule(next[next_count(c)]));
        alts.push_back(write);
      }
      if (!props[i].required && next[c] >= 0) alts.push_back({GrammarBuilder::rule(next[c])});
      if (!alts.empty()) cur[c] = b_.rule_of(alts);
    }
    next = std::move(cur);
  }
  if (next[0] < 0)
    fail(s.contains("minProperties") ? "minProperties" : "maxProperties", path,
         "no object with these properties fits minProperties/maxProperties");
  return GrammarBuilder::rule(b_.rule_of({{b_.byte('{'), GrammarBuilder::rule(next[0]), b_.byte('}')}}));
}

Sym SchemaCompiler::array(const Json& s, const std::string& path, int depth) {
  if (s.contains("items") && s["items"].is_array()) {
    // Draft 4-7 tuples: items as a list is prefixItems, and additionalItems the items after it.
    if (s.contains("prefixItems")) fail("items", subpath(path, "items"), "a list of items beside prefixItems");
    Json t = s;
    t["prefixItems"] = s["items"];
    t.erase("items");
    if (s.contains("additionalItems")) t["items"] = s["additionalItems"];
    t.erase("additionalItems");
    return array(t, path, depth);
  }
  std::vector<Sym> prefix;
  if (s.contains("prefixItems")) {
    const Json& p = s["prefixItems"];
    if (!p.is_array()) fail("prefixItems", subpath(path, "prefixItems"), "must be an array of schemas");
    for (size_t i = 0; i < p.size(); ++i)
      prefix.push_back(schema(p[i], subpath(subpath(path, "prefixItems"), std::to_string(i)), depth + 1));
  }
  const int n_prefix = static_cast<int>(prefix.size());
  int min = count(s, "minItems", path, 0);
  int max = count(s, "maxItems", path, -1);
  if (s.contains("maxItems") && max >= options_.limits.max_repeat) max = options_.limits.max_repeat;
  const bool closed = s.contains("items") && s["items"] == false;
  if (closed) max = max < 0 ? n_prefix : std::min(max, n_prefix);
  if (max >= 0 && min > max) fail("minItems", subpath(path, "minItems"), "is larger than the number of items allowed");
  if (s.contains("uniqueItems") && s["uniqueItems"] == true && max != 0 && max != 1) {
    // Distinct literals are written in the enum's order; any other array of unique items is
    // generated with at most one item (tighter: a grammar cannot compare free values).
    const Json* items = s.contains("items") ? &s["items"] : nullptr;
    if (n_prefix == 0 && items && items->is_object() && (items->contains("enum") || items->contains("const")))
      return unique_literals(*items, min, max, subpath(path, "items"));
    if (min > 1) fail("uniqueItems", subpath(path, "uniqueItems"), "more than one unique item of a non-literal schema");
    max = 1;
  }
  // Items past the prefix, each after a comma (the first one only when there is a prefix).
  Seq tail;
  const int extra_min = std::max(min - n_prefix, 0);
  const int extra_max = max < 0 ? -1 : std::max(max - n_prefix, 0);
  if (extra_max != 0) {
    Sym item = s.contains("items") ? schema(s["items"], subpath(path, "items"), depth + 1) : json_.value();
    Seq sep_item = cat({json_.comma(), {item}});
    if (n_prefix > 0) {
      tail = {b_.repeat(sep_item, extra_min, extra_max)};
    } else {
      Seq run{item, b_.repeat(sep_item, std::max(extra_min - 1, 0), extra_max < 0 ? -1 : extra_max - 1)};
      tail = extra_min > 0 ? run : Seq{b_.optional(run)};
    }
  }
  // Back to front: after[i] is what may follow the first i prefix items.
  int32_t next = b_.rule_of({tail});
  const int last = max < 0 ? n_prefix : std::min(n_prefix, max);
  for (int i = last; i-- > 0;) {
    Seq with = i == 0 ? Seq{prefix[0], GrammarBuilder::rule(next)} : cat({json_.comma(), {prefix[i], GrammarBuilder::rule(next)}});
    std::vector<Seq> alts{with};
    if (i >= min) alts.push_back({});  // the array may end after i items
    next = b_.rule_of(alts);
  }
  return GrammarBuilder::rule(b_.rule_of({{b_.byte('['), GrammarBuilder::rule(next), b_.byte(']')}}));
}

// An array of distinct values of an enum (or const), in the enum's order, min..max of them.
Sym SchemaCompiler::unique_literals(const Json& items, int min, int max, const std::string& path) {
  const std::vector<Json> kept = allowed_values(items, path);
  const int n = static_cast<int>(kept.size());
  std::vector<Seq> literals;  // each value as one rule, so the O(n^2) transitions stay small
  for (const Json& v : kept) literals.push_back({GrammarBuilder::rule(b_.rule_of({b_.literal(v.dump())}))});
  if (n > 256) fail("uniqueItems", path, "unique items of an enum of more than 256 values");
  const bool bounded = max >= 0 && max < n;  // else the increasing order alone bounds the count
  max = bounded ? max : n;
  if (min > max) fail("minItems", path, "more unique items than the enum has values");
  // after[i][c]: value i was the c-th written (c saturates at k when only minItems matters); the
  // array may end, or go on with a later value.
  const int k = bounded ? max : std::max(min, 1);
  auto next_count = [&](int c) { return std::min(c + 1, k); };
  std::vector<std::vector<int32_t>> after(n, std::vector<int32_t>(k + 1, -1));
  for (int i = n; i-- > 0;)
    for (int c = k; c >= 1; --c) {
      std::vector<Seq> alts;
      if (c >= min) alts.push_back({});
      if (!bounded || c < max)
        for (int j = i + 1; j < n; ++j)
          if (after[j][next_count(c)] >= 0)
            alts.push_back(cat({json_.comma(), literals[j], {GrammarBuilder::rule(after[j][next_count(c)])}}));
      if (!alts.empty()) after[i][c] = b_.rule_of(alts);
    }
  std::vector<Seq> first;
  if (min == 0) first.push_back({});
  for (int j = 0; j < n && max >= 1; ++j)
    if (after[j][1] >= 0) first.push_back(cat({literals[j], {GrammarBuilder::rule(after[j][1])}}));
  if (first.empty()) fail("uniqueItems", path, "no array of unique items fits the counts");
  return GrammarBuilder::rule(b_.rule_of({{b_.byte('['), GrammarBuilder::rule(b_.rule_of(first)), b_.byte(']')}}));
}

Sym SchemaCompiler::string(const Json& s, const std::string& path) {
  int min = count(s, "minLength", path, 0);
  int max = count(s, "maxLength", path, -1);
  if (max >= 0 && min > max) fail("minLength", subpath(path, "minLength"), "is larger than maxLength");
  std::vector<std::pair<const char*, std::string>> regexes;  // (keyword, regex), all must match
  for (const char* key : {"pattern", "format"}) {
    if (!s.contains(key)) continue;
    if (!s[key].is_string()) fail(key, subpath(path, key), "must be a string");
    const std::string value = s[key].get<std::string>();
    if (std::string(key) == "pattern") {
      regexes.push_back({key, value});
    } else if (!spec_format(value)) {
      note_unknown("format '" + value + "'", subpath(path, key));
    } else if (const char* re = format_regex(value)) {
      regexes.push_back({key, re});
    } else {
      fail("format", subpath(path, "format"), str_cat("the format '", value, "' is not supported"));
    }
  }
  if (regexes.empty()) return json_.string_length(min, max);
  const bool lengths = s.contains("minLength") || s.contains("maxLength");
  if (regexes.size() == 1 && !lengths) return regex_string(regexes[0].second, regexes[0].first, subpath(path, regexes[0].first));
  // Several constraints on one string: the intersection of their automata, counting characters
  // (compiled once per schema: API schemas repeat the same string types).
  std::string cache_key = str_cat(min, ":", max);
  for (const auto& [k, re] : regexes) cache_key += str_cat(":", re.size(), ":", re);
  if (auto it = product_rules_.find(cache_key); it != product_rules_.end()) return it->second;
  const char* key = regexes[0].first;
  std::vector<RegexAst> asts;
  for (const auto& [k, re] : regexes) {
    RegexOptions ro{.context = CharContext::kJsonString, .search = true,
                    .max_pattern_bytes = options_.limits.max_pattern_bytes,
                    .max_repeat = options_.limits.max_repeat, .keyword = k, .path = subpath(path, k)};
    RegexAst ast = parse_regex(re, ro);
    // An unanchored start is matched at the string's start (tighter: every output still contains
    // a match); text before a match would make the product track a match from every position.
    RegexNode& top = ast.nodes[ast.root];
    if (!top.kids.empty() && ast.nodes[top.kids[0]].kind == RegexNode::Kind::kRepeat && is_any_text(ast, top.kids[0]))
      top.kids.erase(top.kids.begin());
    asts.push_back(std::move(ast));
  }
  Sym body = intersect_regexes(b_, asts, min, max, CharContext::kJsonString, key, subpath(path, key));
  Sym rule = GrammarBuilder::rule(b_.rule_of({{b_.byte('"'), body, b_.byte('"')}}));
  product_rules_.emplace(cache_key, rule);
  return rule;
}

Sym SchemaCompiler::regex_string(const std::string& pattern, const char* keyword, const std::string& path) {
  // Compiled once per schema: big API schemas repeat the same format many times.
  auto it = pattern_rules_.find(pattern);
  if (it != pattern_rules_.end()) return it->second;
  RegexOptions ro{.context = CharContext::kJsonString, .search = true,
                  .max_pattern_bytes = options_.limits.max_pattern_bytes,
                  .max_repeat = options_.limits.max_repeat, .keyword = keyword, .path = path};
  // Kept only once compiled: a refused pattern leaves no entry behind (best effort retries).
  Sym rule = GrammarBuilder::rule(b_.rule_of({{b_.byte('"'), compile_regex(b_, pattern, ro), b_.byte('"')}}));
  pattern_rules_.emplace(pattern, rule);
  return rule;
}

Sym SchemaCompiler::numeric(const Json& s, bool integer, const std::string& path) {
  // Bounds become whole numbers, rounded inward (a tighter range, never a looser one), and are
  // kept within +-1e18.
  constexpr double kLimit = 1e18;
  std::optional<int64_t> lo, hi;
  // Draft 4: exclusiveMinimum/Maximum are booleans that make minimum/maximum exclusive.
  auto draft4 = [&](const char* key) { return s.contains(key) && s[key].is_boolean(); };
  auto bound = [&](const char* key) -> std::optional<double> {
    if (!s.contains(key) || draft4(key)) return std::nullopt;
    if (!s[key].is_number()) fail(key, subpath(path, key), "must be a number");
    return s[key].get<double>();
  };
  auto tighten_lo = [&](double v) { v = std::max(v, -kLimit); lo = lo ? std::max(*lo, (int64_t)v) : (int64_t)v; };
  auto tighten_hi = [&](double v) { v = std::min(v, kLimit); hi = hi ? std::min(*hi, (int64_t)v) : (int64_t)v; };
  const bool open_lo = draft4("exclusiveMinimum") && s["exclusiveMinimum"] == true;
  const bool open_hi = draft4("exclusiveMaximum") && s["exclusiveMaximum"] == true;
  if (auto v = bound("minimum")) tighten_lo(open_lo ? std::floor(*v) + 1 : std::ceil(*v));
  if (auto v = bound("exclusiveMinimum")) tighten_lo(std::floor(*v) + 1);
  if (auto v = bound("maximum")) tighten_hi(open_hi ? std::ceil(*v) - 1 : std::floor(*v));
  if (auto v = bound("exclusiveMaximum")) tighten_hi(std::ceil(*v) - 1);
  if (lo && hi && *lo > *hi) fail(s.contains("minimum") ? "minimum" : "exclusiveMinimum", path,
                                  "no whole number lies within the bounds");
  if (s.contains("multipleOf")) return multiples(s, lo, hi, path);
  if (!lo && !hi) return integer ? json_.integer() : json_.number();
  return integer ? integer_range(b_, lo, hi) : number_range(b_, lo, hi);
}

// multipleOf: whole multiples within the bounds, written out (at most max_enum of them). A
// fraction whose inverse is whole (0.01) makes every integer a multiple: the integers are
// generated (tighter for numbers).
Sym SchemaCompiler::multiples(const Json& s, std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& path) {
  const std::string key_path = subpath(path, "multipleOf");
  if (!s["multipleOf"].is_number() || s["multipleOf"].get<double>() <= 0) fail("multipleOf", key_path, "must be a positive number");
  const double m = s["multipleOf"].get<double>();
  const double inverse = 1 / m;
  if (m < 1 && std::fabs(inverse - std::round(inverse)) < 1e-9)
    return lo || hi ? integer_range(b_, lo, hi) : json_.integer();
  if (m != std::floor(m) || m > 1e15) fail("multipleOf", key_path, "only whole multiples (or fractions 1/n) are supported");
  const int64_t step = static_cast<int64_t>(m);
  if (step == 1) return lo || hi ? integer_range(b_, lo, hi) : json_.integer();
  if (!lo || !hi) fail("multipleOf", key_path, "a multiple other than 1 needs both bounds");
  // The first multiple at or above lo (division rounds toward zero).
  int64_t first = (*lo / step) * step;
  if (first < *lo) first += step;
  if (*hi < first) fail("multipleOf", key_path, "no multiple lies within the bounds");
  if (static_cast<size_t>((*hi - first) / step) >= options_.limits.max_enum)
    fail("multipleOf", key_path, str_cat("more than ", options_.limits.max_enum, " multiples within the bounds"));
  std::vector<Seq> alts;
  for (int64_t v = first; v <= *hi; v += step) alts.push_back(b_.literal(std::to_string(v)));
  return GrammarBuilder::rule(b_.rule_of(alts));
}

}  // namespace flashserve::structured

namespace flashserve::structured {

// The key of an additional property: any string when no property is declared; otherwise printable
// ASCII without escapes that spells none of the declared names (a trie of the names, with an exit
// to "anything" wherever a key leaves it), so a declared property is never written twice.
Sym SchemaCompiler::extra_key(const std::set<std::string>& declared) {
  if (declared.empty()) return json_.any_string();
  ByteSet alphabet;
  for (int c = 0x20; c < 0x7F; ++c) alphabet.set(c);
  alphabet.reset('"').reset('\\');
  Sym any_rest = GrammarBuilder::rule(b_.rule_of({{b_.star({b_.bytes(alphabet)}), b_.byte('"')}}));
  std::vector<std::string> names;
  for (const std::string& n : declared) {
    bool plain = true;
    for (unsigned char c : n) plain = plain && alphabet.test(c);
    if (plain) names.push_back(n);
  }
  // One rule per trie node (a prefix of some name); names is sorted, so a node's names are a run.
  std::function<Sym(const std::string&, size_t, size_t)> node = [&](const std::string& prefix, size_t lo, size_t hi) {
    std::vector<Seq> alts;
    bool is_name = false;
    ByteSet other = alphabet;
    for (size_t i = lo; i < hi;) {
      if (names[i].size() == prefix.size()) {
        is_name = true;
        ++i;
        continue;
      }
      const char c = names[i][prefix.size()];
      size_t j = i;
      while (j < hi && names[j].size() > prefix.size() && names[j][prefix.size()] == c) ++j;
      other.reset(static_cast<uint8_t>(c));
      alts.push_back({b_.byte(static_cast<uint8_t>(c)), node(prefix + c, i, j)});
      i = j;
    }
    if (!is_name) alts.push_back({b_.byte('"')});
    if (other.any()) alts.push_back({b_.bytes(other), any_rest});
    return GrammarBuilder::rule(b_.rule_of(alts));
  };
  return GrammarBuilder::rule(b_.rule_of({{b_.byte('"'), node("", 0, names.size())}}));
}

std::pair<std::string, const Json*> SchemaCompiler::key_pattern(const Json& s, const std::set<std::string>& declared,
                                                                const std::string& path) const {
  if (!s.contains("patternProperties")) return {"", nullptr};
  const Json& pp = s["patternProperties"];
  const std::string pp_path = subpath(path, "patternProperties");
  if (!pp.is_object()) fail("patternProperties", pp_path, "must be an object");
  if (pp.empty()) return {"", nullptr};
  if (pp.size() > 1) fail("patternProperties", pp_path, "more than one pattern is not supported");
  const std::string pattern = pp.begin().key();
  // A declared name the pattern matches would need both schemas (and could be written twice).
  try {
    const std::regex re(pattern, std::regex::ECMAScript);
    for (const std::string& name : declared)
      if (std::regex_search(name, re))
        fail("patternProperties", pp_path, str_cat("the declared property '", name, "' matches '", pattern, "'"));
  } catch (const std::regex_error&) {
    fail("patternProperties", pp_path, str_cat("the pattern '", pattern, "' is not supported"));
  }
  if (pp.begin().value() == false) {  // no key may match it
    if (s.contains("additionalProperties") && s["additionalProperties"] != false)
      fail("patternProperties", pp_path, "a false pattern beside additionalProperties is not supported");
    return {"", nullptr};
  }
  return {pattern, &pp.begin().value()};
}

}  // namespace flashserve::structured
