// The validator's walk: one Run per validation holds the first violation and the compiled regexes.
// Branches that may fail without the value failing (anyOf, oneOf, not, if, contains) run quietly:
// their violations are not the value's.
#include "structured/schema_validator.h"

#include <arpa/inet.h>

#include <cmath>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "core/error.h"
#include "structured/schema_compiler_impl.h"
#include "structured/schema_error.h"

namespace flashserve::structured {

namespace validation {

using Json = nlohmann::json;

std::string child(const std::string& path, const std::string& key) { return pointer_child(path, key); }

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool full_match(const char* re, const std::string& s) { return std::regex_match(s, std::regex(re)); }

bool valid_date(const std::string& s) {
  if (!full_match("[0-9]{4}-[0-9]{2}-[0-9]{2}", s)) return false;
  const int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)), d = std::stoi(s.substr(8, 2));
  static const int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (m < 1 || m > 12 || d < 1 || d > kDays[m - 1]) return false;
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return !(m == 2 && d == 29 && !leap);
}

bool valid_time(const std::string& s) {
  return full_match("([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])", s);
}

// The formats the grammar generates, checked; others (annotations by default in 2019-09 and
// later) pass.
bool valid_format(const std::string& format, const std::string& s) {
  if (format == "date") return valid_date(s);
  if (format == "time") return valid_time(s);
  if (format == "date-time") {
    const size_t t = s.find_first_of("Tt");
    return t == 10 && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
  }
  if (format == "email") return full_match("[^@\\s]+@[^@\\s]+", s);
  if (format == "uuid") return full_match("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", s);
  if (format == "ipv4" || format == "ipv6") {
    unsigned char buf[16];
    return inet_pton(format == "ipv4" ? AF_INET : AF_INET6, s.c_str(), buf) == 1;
  }
  if (format == "hostname")
    return s.size() <= 253 && full_match("[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*", s);
  if (format == "uri" || format == "iri") return full_match("[A-Za-z][A-Za-z0-9+.-]*:[^\\s]*", s);
  return true;
}

double as_double(const Json& v) { return v.get<double>(); }

// What in-place applicators evaluated, for unevaluatedProperties / unevaluatedItems.
struct Evaluated {
  std::set<std::string> properties;
  size_t items = 0;
  bool all_items = false;
  void add(const Evaluated& o) {
    properties.insert(o.properties.begin(), o.properties.end());
    items = std::max(items, o.items);
    all_items = all_items || o.all_items;
  }
};

class Run {
 public:
  explicit Run(const Json& root) : root_(root) {}

  bool check(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth);
  std::optional<SchemaViolation> first;

 private:
  bool fail(const std::string& keyword, const std::string& sp, const std::string& ip, const std::string& why) {
    if (quiet_ == 0 && !first) first = SchemaViolation{keyword, child(sp, keyword), ip, why};
    return false;
  }
  bool quiet_check(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth) {
    ++quiet_;
    const bool ok = check(s, v, sp, ip, ev, depth);
    --quiet_;
    return ok;
  }
  // nullptr: a pattern std::regex cannot parse (it then constrains nothing we can check).
  const std::regex* regex(const std::string& pattern) {
    auto it = regexes_.find(pattern);
    if (it != regexes_.end()) return it->second.get();
    std::unique_ptr<std::regex> re;
    try {
      re = std::make_unique<std::regex>(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
    }
    return regexes_.emplace(pattern, std::move(re)).first->second.get();
  }
  // Texts past kMaxRegexText pass unchecked: std::regex recurses per character, and an output
  // must not exhaust the server thread's stack.
  static constexpr size_t kMaxRegexText = 4096;
  bool search(const std::string& pattern, const std::string& text) {
    if (text.size() > kMaxRegexText) return true;
    const std::regex* re = regex(pattern);
    return re == nullptr || std::regex_search(text, *re);
  }
  const Json* resolve(const std::string& ref) const {
    if (ref.empty() || ref[0] != '#') return nullptr;
    try {
      return &root_.at(Json::json_pointer(ref.substr(1)));
    } catch (const Json::exception&) {
      return nullptr;
    }
  }
  bool numbers(const Json& s, const Json& v, const std::string& sp, const std::string& ip);
  bool strings(const Json& s, const Json& v, const std::string& sp, const std::string& ip);
  bool arrays(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth);
  bool objects(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth);
  bool applicators(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth);

  const Json& root_;
  int quiet_ = 0;
  std::map<std::string, std::unique_ptr<std::regex>> regexes_;
};

bool Run::check(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth) {
  if (s.is_boolean()) {
    if (s.get<bool>()) return true;
    if (quiet_ == 0 && !first) first = SchemaViolation{"false", sp, ip, "the schema false admits no value"};
    return false;
  }
  if (!s.is_object() || depth > 256) return true;  // malformed or runaway: nothing to check
  if (s.contains("$ref") && s["$ref"].is_string()) {
    const Json* target = resolve(s["$ref"].get<std::string>());
    if (target != nullptr && !check(*target, v, s["$ref"].get<std::string>().substr(1), ip, ev, depth + 1)) return false;
  }
  if (s.contains("type")) {
    const Json& t = s["type"];
    bool ok = v.is_null() && s.value("nullable", false);
    if (t.is_string()) ok = ok || value_has_type(v, t.get<std::string>());
    else if (t.is_array())
      for (const Json& x : t) ok = ok || (x.is_string() && value_has_type(v, x.get<std::string>()));
    else ok = true;
    if (!ok) return fail("type", sp, ip, "the value has another type");
  }
  if (s.contains("enum") && s["enum"].is_array()) {
    bool ok = false;
    for (const Json& x : s["enum"]) ok = ok || x == v;
    if (!ok) return fail("enum", sp, ip, "the value is not one of the enum's");
  }
  if (s.contains("const") && s["const"] != v) return fail("const", sp, ip, "the value is not the const");
  if (v.is_number() && !numbers(s, v, sp, ip)) return false;
  if (v.is_string() && !strings(s, v, sp, ip)) return false;
  if (!applicators(s, v, sp, ip, ev, depth)) return false;
  if (v.is_array() && !arrays(s, v, sp, ip, ev, depth)) return false;
  if (v.is_object() && !objects(s, v, sp, ip, ev, depth)) return false;
  return true;
}

bool Run::numbers(const Json& s, const Json& v, const std::string& sp, const std::string& ip) {
  const double x = as_double(v);
  auto num = [&](const char* k) { return s.contains(k) && s[k].is_number(); };
  // Draft 4: exclusiveMinimum/Maximum are booleans modifying minimum/maximum.
  const bool ex_min = s.value("exclusiveMinimum", Json(false)) == true;
  const bool ex_max = s.value("exclusiveMaximum", Json(false)) == true;
  if (num("minimum") && (ex_min ? x <= as_double(s["minimum"]) : x < as_double(s["minimum"])))
    return fail("minimum", sp, ip, "below the minimum");
  if (num("maximum") && (ex_max ? x >= as_double(s["maximum"]) : x > as_double(s["maximum"])))
    return fail("maximum", sp, ip, "above the maximum");
  if (num("exclusiveMinimum") && x <= as_double(s["exclusiveMinimum"])) return fail("exclusiveMinimum", sp, ip, "not above the exclusive minimum");
  if (num("exclusiveMaximum") && x >= as_double(s["exclusiveMaximum"])) return fail("exclusiveMaximum", sp, ip, "not below the exclusive maximum");
  for (const char* k : {"multipleOf", "divisibleBy"}) {
    if (!num(k) || as_double(s[k]) <= 0) continue;
    bool ok;
    if (v.is_number_integer() && s[k].is_number_integer()) {
      ok = v.get<int64_t>() % s[k].get<int64_t>() == 0;
    } else {
      const double q = x / as_double(s[k]);
      ok = std::isfinite(q) && std::fabs(q - std::round(q)) <= 1e-9 * std::max(1.0, std::fabs(q));
    }
    if (!ok) return fail(k, sp, ip, "not a multiple");
  }
  return true;
}

bool Run::strings(const Json& s, const Json& v, const std::string& sp, const std::string& ip) {
  const std::string& str = v.get_ref<const std::string&>();
  const size_t n = code_points(str);
  if (s.contains("minLength") && s["minLength"].is_number() && double(n) < as_double(s["minLength"]))
    return fail("minLength", sp, ip, "shorter than minLength");
  if (s.contains("maxLength") && s["maxLength"].is_number() && double(n) > as_double(s["maxLength"]))
    return fail("maxLength", sp, ip, "longer than maxLength");
  if (s.contains("pattern") && s["pattern"].is_string() && !search(s["pattern"].get<std::string>(), str))
    return fail("pattern", sp, ip, "does not match the pattern");
  if (s.contains("format") && s["format"].is_string() && !valid_format(s["format"].get<std::string>(), str))
    return fail("format", sp, ip, "not of the format");
  return true;
}

bool Run::applicators(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth) {
  if (s.contains("allOf") && s["allOf"].is_array())
    for (size_t i = 0; i < s["allOf"].size(); ++i)
      if (!check(s["allOf"][i], v, child(child(sp, "allOf"), std::to_string(i)), ip, ev, depth + 1)) return false;
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k) || !s[k].is_array()) continue;
    int matched = 0;
    for (size_t i = 0; i < s[k].size(); ++i) {
      Evaluated branch;
      if (quiet_check(s[k][i], v, child(child(sp, k), std::to_string(i)), ip, branch, depth + 1)) {
        ++matched;
        ev.add(branch);
      }
    }
    if (matched == 0) return fail(k, sp, ip, "no alternative matches");
    if (std::string(k) == "oneOf" && matched > 1) return fail(k, sp, ip, "more than one alternative matches");
  }
  if (s.contains("not")) {
    Evaluated ignored;
    if (quiet_check(s["not"], v, child(sp, "not"), ip, ignored, depth + 1)) return fail("not", sp, ip, "matches the schema under not");
  }
  if (s.contains("if")) {
    Evaluated cond;
    const bool holds = quiet_check(s["if"], v, child(sp, "if"), ip, cond, depth + 1);
    if (holds) ev.add(cond);
    const char* k = holds ? "then" : "else";
    if (s.contains(k) && !check(s[k], v, child(sp, k), ip, ev, depth + 1)) return false;
  }
  return true;
}

bool Run::arrays(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth) {
  const size_t n = v.size();
  if (s.contains("minItems") && s["minItems"].is_number() && double(n) < as_double(s["minItems"])) return fail("minItems", sp, ip, "too few items");
  if (s.contains("maxItems") && s["maxItems"].is_number() && double(n) > as_double(s["maxItems"])) return fail("maxItems", sp, ip, "too many items");
  if (s.value("uniqueItems", false) == true)
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j)
        if (v[i] == v[j]) return fail("uniqueItems", sp, ip, "two items are equal");
  // The tuple part: prefixItems, or items as a list (drafts 4-7) with additionalItems after it.
  const Json* prefix = s.contains("prefixItems") ? &s["prefixItems"] : nullptr;
  const char* prefix_key = "prefixItems";
  const Json* rest = s.contains("items") ? &s["items"] : nullptr;
  const char* rest_key = "items";
  if (rest != nullptr && rest->is_array()) {
    prefix = rest;
    prefix_key = "items";
    rest = s.contains("additionalItems") ? &s["additionalItems"] : nullptr;
    rest_key = "additionalItems";
  }
  size_t i = 0;
  if (prefix != nullptr && prefix->is_array())
    for (; i < n && i < prefix->size(); ++i) {
      Evaluated sub;
      if (!check((*prefix)[i], v[i], child(child(sp, prefix_key), std::to_string(i)), child(ip, std::to_string(i)), sub, depth + 1)) return false;
    }
  ev.items = std::max(ev.items, i);
  if (rest != nullptr) {
    for (; i < n; ++i) {
      Evaluated sub;
      if (!check(*rest, v[i], child(sp, rest_key), child(ip, std::to_string(i)), sub, depth + 1)) return false;
    }
    ev.all_items = true;
  }
  if (s.contains("contains")) {
    size_t hits = 0;
    for (size_t k = 0; k < n; ++k) {
      Evaluated sub;
      hits += quiet_check(s["contains"], v[k], child(sp, "contains"), child(ip, std::to_string(k)), sub, depth + 1);
    }
    const double lo = s.contains("minContains") && s["minContains"].is_number() ? as_double(s["minContains"]) : 1;
    if (double(hits) < lo) return fail("contains", sp, ip, "too few items match contains");
    if (s.contains("maxContains") && s["maxContains"].is_number() && double(hits) > as_double(s["maxContains"]))
      return fail("maxContains", sp, ip, "too many items match contains");
  }
  if (s.contains("unevaluatedItems") && !ev.all_items)
    for (size_t k = ev.items; k < n; ++k) {
      Evaluated sub;
      if (!check(s["unevaluatedItems"], v[k], child(sp, "unevaluatedItems"), child(ip, std::to_string(k)), sub, depth + 1)) return false;
    }
  return true;
}

bool Run::objects(const Json& s, const Json& v, const std::string& sp, const std::string& ip, Evaluated& ev, int depth) {
  const size_t n = v.size();
  if (s.contains("minProperties") && s["minProperties"].is_number() && double(n) < as_double(s["minProperties"]))
    return fail("minProperties", sp, ip, "too few properties");
  if (s.contains("maxProperties") && s["maxProperties"].is_number() && double(n) > as_double(s["maxProperties"]))
    return fail("maxProperties", sp, ip, "too many properties");
  if (s.contains("required") && s["required"].is_array())
    for (const Json& r : s["required"])
      if (r.is_string() && !v.contains(r.get<std::string>())) return fail("required", sp, ip, "'" + r.get<std::string>() + "' is missing");
  auto required_with = [&](const char* k, const std::string& name, const Json& names) {
    for (const Json& r : names)
      if (r.is_string() && !v.contains(r.get<std::string>()))
        return fail(k, sp, ip, "'" + name + "' needs '" + r.get<std::string>() + "'");
    return true;
  };
  for (const char* k : {"dependentRequired", "dependentSchemas", "dependencies"}) {
    if (!s.contains(k) || !s[k].is_object()) continue;
    for (const auto& [name, dep] : s[k].items()) {
      if (!v.contains(name)) continue;
      if (dep.is_array()) {
        if (!required_with(k, name, dep)) return false;
      } else if (!check(dep, v, child(child(sp, k), name), ip, ev, depth + 1)) {
        return false;
      }
    }
  }
  for (const auto& [key, value] : v.items()) {
    const std::string vp = child(ip, key);
    if (s.contains("propertyNames")) {
      Evaluated sub;
      if (!check(s["propertyNames"], Json(key), child(sp, "propertyNames"), vp, sub, depth + 1)) return false;
    }
    bool covered = false;
    if (s.contains("properties") && s["properties"].is_object() && s["properties"].contains(key)) {
      covered = true;
      Evaluated sub;
      if (!check(s["properties"][key], value, child(child(sp, "properties"), key), vp, sub, depth + 1)) return false;
    }
    if (s.contains("patternProperties") && s["patternProperties"].is_object())
      for (const auto& [pattern, sub_schema] : s["patternProperties"].items()) {
        if (!search(pattern, key)) continue;
        covered = true;
        Evaluated sub;
        if (!check(sub_schema, value, child(child(sp, "patternProperties"), pattern), vp, sub, depth + 1)) return false;
      }
    if (!covered && s.contains("additionalProperties")) {
      covered = true;
      Evaluated sub;
      if (!check(s["additionalProperties"], value, child(sp, "additionalProperties"), vp, sub, depth + 1)) return false;
    }
    if (covered) ev.properties.insert(key);
  }
  if (s.contains("unevaluatedProperties"))
    for (const auto& [key, value] : v.items()) {
      if (ev.properties.count(key)) continue;
      Evaluated sub;
      if (!check(s["unevaluatedProperties"], value, child(sp, "unevaluatedProperties"), child(ip, key), sub, depth + 1)) return false;
    }
  return true;
}

}  // namespace validation

using validation::Evaluated;
using validation::Run;

SchemaValidator::SchemaValidator(std::string_view schema_text) {
  try {
    root_ = nlohmann::json::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    throw SchemaError("schema", "", str_cat("not valid JSON: ", e.what()));
  }
}

std::optional<SchemaViolation> SchemaValidator::validate(std::string_view json_text) const {
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::out_of_range& e) {  // valid JSON, beyond a double's range
    return SchemaViolation{"json", "", "", str_cat("a number beyond the double range: ", e.what())};
  } catch (const nlohmann::json::exception& e) {
    return SchemaViolation{"json", "", "", str_cat("the output is not JSON: ", e.what())};
  }
  return validate_value(value);
}

std::optional<SchemaViolation> SchemaValidator::validate_value(const nlohmann::json& value) const {
  Run run(root_);
  Evaluated ev;
  if (run.check(root_, value, "", "", ev, 0)) return std::nullopt;
  if (!run.first) return SchemaViolation{"schema", "", "", "the value does not match the schema"};
  return run.first;
}

}  // namespace flashserve::structured
