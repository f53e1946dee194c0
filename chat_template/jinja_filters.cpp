// jinja2's filters and tests with the behaviour of jinja2 3.x (jinja2/filters.py, tests.py),
// transformers' tojson, and the literal rule: filters that only cut or join strings keep the
// literal ranges exactly, the others mark a result that read any literal byte wholly literal.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>

#include "chat_template/jinja_builtins.h"
#include "core/error.h"

namespace flashserve::jinja {
namespace {

bool arg_bool(CallArgs& a, size_t i, const char* name, bool dflt) {
  const Value* v = arg(a, i, name);
  return v ? truthy(*v) : dflt;
}

// A string result computed from `input`'s text: literal as a whole if the input had any.
Value derived(const Value& input, std::string result) {
  return Value::string(Text::derived(std::move(result), to_text(input).any_literal()));
}

// item.attr for selectattr/map/sort: a key first, then a method; "a.b" and "0" walk down.
Value attribute_of(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    require_defined(cur);  // jinja2's getitem on Undefined raises
    Value next;
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](unsigned char c) { return std::isdigit(c); });
    if (cur.is_mapping()) {
      if (const Value* v = cur.mapping().find(Value::string(part))) next = *v;
    } else if (digits && cur.is(Value::Type::List)) {
      const size_t i = std::strtoull(part.c_str(), nullptr, 10);
      if (i < cur.items().size()) next = cur.items()[i];
    }
    if (next.is_undefined()) next = find_method(cur, part);
    if (next.is_undefined()) {
      next = Value::undefined(str_cat("'", type_name(cur), " object' has no attribute '", part, "'"));
    }
    cur = next;
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// ---- filters ----

Value f_trim(const Value& v, CallArgs& a) {
  const Value* chars = arg(a, 0, "chars");
  const bool given = chars && !chars->is(Value::Type::None);
  if (given && !chars->is(Value::Type::String)) throw RenderError("trim chars must be a string");
  return Value::string(strip_text(to_text(v), 'b', given ? &chars->str() : nullptr));
}

Value f_length(const Value& v, CallArgs&) {
  switch (v.type()) {
    case Value::Type::Undefined: return Value::integer(0);
    case Value::Type::String: return Value::integer(static_cast<int64_t>(code_point_count(v.str())));
    case Value::Type::List: return Value::integer(static_cast<int64_t>(v.items().size()));
    case Value::Type::Dict: return Value::integer(static_cast<int64_t>(v.mapping().items.size()));
    default: throw RenderError(str_cat("object of type '", type_name(v), "' has no len()"));
  }
}

Value f_tojson(const Value& v, CallArgs& a) {
  const Value* ascii = arg(a, 0, "ensure_ascii");
  if (ascii && truthy(*ascii)) throw RenderError("tojson: ensure_ascii=True is not supported");
  const Value* indent = arg(a, 1, "indent");
  const Value* separators = arg(a, 2, "separators");
  if (separators && !separators->is(Value::Type::None)) {
    throw RenderError("tojson: custom separators are not supported");
  }
  int n = -1;
  if (indent && !indent->is(Value::Type::None)) {
    if (!indent->is(Value::Type::Int) || indent->as_int() < 0 || indent->as_int() > 64) {
      throw RenderError("tojson: indent must be an integer from 0 to 64");
    }
    n = static_cast<int>(indent->as_int());
  }
  Text probe = to_text(v);  // any literal inside -> the JSON is literal as a whole
  std::string json = to_json(v, n, arg_bool(a, 3, "sort_keys", false));
  return Value::string(Text::derived(std::move(json), probe.any_literal()));
}

Value f_upper(const Value& v, CallArgs&) { return derived(v, ascii_case(to_text(v).s, true)); }
Value f_lower(const Value& v, CallArgs&) { return derived(v, ascii_case(to_text(v).s, false)); }

Value f_capitalize(const Value& v, CallArgs&) {
  std::string s = ascii_case(to_text(v).s, false);
  if (!s.empty()) s[0] = std::toupper(static_cast<unsigned char>(s[0]));
  return derived(v, std::move(s));
}

// jinja2's title: the first character of each run after - space ( { [ < is upper-cased, the
// rest lower-cased.
Value f_title(const Value& v, CallArgs&) {
  std::string s = to_text(v).s;
  bool word_start = true;
  for (char& c : s) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                     std::isspace(static_cast<unsigned char>(c));
    c = word_start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c));
    word_start = sep;
  }
  return derived(v, std::move(s));
}

Value f_default(const Value& v, CallArgs& a) {
  const Value* dflt = arg(a, 0, "default_value");
  const bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt ? *dflt : Value::string("");
  return v;
}

Value f_first(const Value& v, CallArgs&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, CallArgs&) {
  List items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_join(const Value& v, CallArgs& a) {
  const Value* sep = arg(a, 0, "d");
  const Value* attribute = arg(a, 1, "attribute");
  const Text separator = sep ? to_text(*sep) : Text();
  Text out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out.append(separator);
    first = false;
    out.append(to_text(attribute ? attribute_of(item, to_text(*attribute).s) : item));
  }
  return Value::string(std::move(out));
}

Value f_replace(const Value& v, CallArgs& a) {
  const Value* from = arg(a, 0, "old");
  const Value* to = arg(a, 1, "new");
  if (!from || !to) throw RenderError("replace needs old and new");
  CallArgs inner;
  inner.positional = {Value::string(to_text(*from).s), Value::string(to_text(*to).s)};
  if (const Value* count = arg(a, 2, "count")) inner.positional.push_back(*count);
  Value s = Value::string(to_text(v));
  Value out = find_method(s, "replace").call(inner);
  const bool literal = s.text().any_literal() || to_text(*to).any_literal();
  return Value::string(Text::derived(out.str(), literal));
}

Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is(Value::Type::Dict)) {  // a namespace is not a mapping to Python
    throw RenderError(str_cat("can only get item pairs from a mapping, not ", type_name(v)));
  }
  List out;
  for (const auto& [k, x] : v.mapping().items) out.push_back(Value::tuple({k, x}));
  return Value::list(std::move(out));
}

Value f_string(const Value& v, CallArgs&) { return Value::string(to_text(v)); }
Value f_safe(const Value& v, CallArgs&) { return v.is(Value::Type::String) ? v : Value::string(to_text(v)); }
Value f_list(const Value& v, CallArgs&) { return Value::list(iterate(v)); }

// Python's int(str): optional sign, digits and underscores between digits, surrounding spaces.
bool parse_int(std::string s, int64_t& out) {
  const size_t b = s.find_first_not_of(" \t\n\r\f\v"), e = s.find_last_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return false;
  s = s.substr(b, e - b + 1);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    digits += s[i];
  }
  if (digits.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (*end != 0 || errno == ERANGE || !(std::isdigit(static_cast<unsigned char>(digits.back())))) return false;
  if (!std::isdigit(static_cast<unsigned char>(digits[0])) && digits[0] != '+' && digits[0] != '-') return false;
  out = v;
  return true;
}

bool parse_float(const std::string& s, double& out) {
  const size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str() + b, &end);
  if (end == s.c_str() + b) return false;
  return std::string(end).find_first_not_of(" \t\n\r\f\v") == std::string::npos;
}

Value f_int(const Value& v, CallArgs& a) {
  const Value* dflt = arg(a, 0, "default");
  const Value fallback = dflt ? *dflt : Value::integer(0);
  require_defined(v);  // jinja2's Undefined fails int() and float() instead of defaulting
  switch (v.type()) {
    case Value::Type::Int: return v;
    case Value::Type::Bool: return Value::integer(v.as_int());
    case Value::Type::Float: {
      const double f = v.as_double();
      if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
      return Value::integer(static_cast<int64_t>(f));
    }
    case Value::Type::String: {
      int64_t i;
      if (parse_int(v.str(), i)) return Value::integer(i);
      double f;
      if (parse_float(v.str(), f) && std::isfinite(f) && std::fabs(f) < 9.2e18) {
        return Value::integer(static_cast<int64_t>(f));
      }
      return fallback;
    }
    default: return fallback;
  }
}

Value f_float(const Value& v, CallArgs& a) {
  const Value* dflt = arg(a, 0, "default");
  const Value fallback = dflt ? *dflt : Value::number(0.0);
  require_defined(v);
  if (v.is_number() || v.is(Value::Type::Bool)) return Value::number(v.as_double());
  double f;
  if (v.is(Value::Type::String) && parse_float(v.str(), f)) return Value::number(f);
  return fallback;
}

Value f_abs(const Value& v, CallArgs&) {
  if (v.is(Value::Type::Float)) return Value::number(std::fabs(v.as_double()));
  if (v.is(Value::Type::Int) || v.is(Value::Type::Bool)) {
    if (v.as_int() == INT64_MIN) throw RenderError("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  throw RenderError(str_cat("bad operand type for abs(): '", type_name(v), "'"));
}

Value f_reverse(const Value& v, CallArgs&) {
  if (v.is(Value::Type::String)) {
    List chars = iterate(v);
    Text out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(it->text());
    return Value::string(std::move(out));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

TestFn test_named(const Value* name) {
  if (!name || !name->is(Value::Type::String)) throw RenderError("a test name must be a string");
  TestFn t = find_test(name->str());
  if (!t) throw RenderError(str_cat("no test named '", name->str(), "'"));
  return t;
}

// select/reject (attr == nullptr) and selectattr/rejectattr: positional args after the test name
// go to the test.
Value filter_by_test(const Value& v, CallArgs& a, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    const Value* attr = arg(a, next++, "attribute");
    if (!attr) throw RenderError("selectattr/rejectattr need an attribute name");
    attribute = to_text(*attr).s;
  }
  TestFn test = nullptr;
  if (next < a.positional.size()) test = test_named(&a.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + std::min(next, a.positional.size()), a.positional.end());
  List out;
  if (!truthy(v)) return Value::list({});  // jinja2 skips a false sequence without iterating it
  for (const Value& item : iterate(v)) {
    const Value probe = by_attribute ? attribute_of(item, attribute) : item;
    CallArgs args = test_args;
    const bool pass = test ? test(probe, args) : truthy(probe);
    if (pass == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(const Value& v, CallArgs& a) { return filter_by_test(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return filter_by_test(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return filter_by_test(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return filter_by_test(v, a, true, false); }

// map(attribute='x'[, default=d]) or map('filter', args...).
Value f_map(const Value& v, CallArgs& a) {
  List out;
  if (!truthy(v)) return Value::list({});  // as jinja2: a false sequence maps to nothing
  if (const Value* attr = arg(a, 99, "attribute")) {
    const Value* dflt = arg(a, 99, "default");
    for (const Value& item : iterate(v)) {
      Value x = attribute_of(item, to_text(*attr).s);
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is(Value::Type::String)) {
    throw RenderError("map needs a filter name or attribute=");
  }
  FilterFn f = find_filter(a.positional[0].str());
  if (!f) throw RenderError(str_cat("no filter named '", a.positional[0].str(), "'"));
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v)) {
    CallArgs args = rest;
    out.push_back(f(item, args));
  }
  return Value::list(std::move(out));
}

// indent(width=4, first=False, blank=False): every line after the first gets the padding;
// empty lines only with blank=True.
Value f_indent(const Value& v, CallArgs& a) {
  const Value* width = arg(a, 0, "width");
  std::string pad(4, ' ');
  if (width && width->is(Value::Type::String)) {
    pad = width->str();
  } else if (width) {
    if (!width->is(Value::Type::Int)) throw RenderError("indent width must be an integer or string");
    pad = std::string(static_cast<size_t>(std::clamp<int64_t>(width->as_int(), 0, 1000)), ' ');
  }
  const bool first = arg_bool(a, 1, "first", false);
  const bool blank = arg_bool(a, 2, "blank", false);
  if (!v.is(Value::Type::String)) throw RenderError(str_cat("indent needs a string, not ", type_name(v)));
  const std::string s = v.str();
  std::string out;
  size_t start = 0;
  for (bool first_line = true;; first_line = false) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? nl : nl - start);
    if (!first_line) out += '\n';
    if (!first_line && (blank || !line.empty())) out += pad;
    out += line;
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  if (first) out = pad + out;
  return derived(v, std::move(out));
}

// ---- tests ----

bool t_defined(const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, CallArgs&) { return v.is(Value::Type::None); }
bool t_boolean(const Value& v, CallArgs&) { return v.is(Value::Type::Bool); }
bool t_true(const Value& v, CallArgs&) { return v.is(Value::Type::Bool) && v.as_bool(); }
bool t_false(const Value& v, CallArgs&) { return v.is(Value::Type::Bool) && !v.as_bool(); }
bool t_integer(const Value& v, CallArgs&) { return v.is(Value::Type::Int); }
bool t_float(const Value& v, CallArgs&) { return v.is(Value::Type::Float); }
bool t_number(const Value& v, CallArgs&) { return v.is_number() || v.is(Value::Type::Bool); }
bool t_string(const Value& v, CallArgs&) { return v.is(Value::Type::String); }
bool t_mapping(const Value& v, CallArgs&) { return v.is(Value::Type::Dict); }
bool t_iterable(const Value& v, CallArgs&) {
  return v.is_undefined() || v.is(Value::Type::String) || v.is(Value::Type::List) || v.is(Value::Type::Dict);
}
bool t_sequence(const Value& v, CallArgs& a) { return t_iterable(v, a); }
// Undefined counts: jinja2's Undefined defines __call__ (to raise when called).
bool t_callable(const Value& v, CallArgs&) { return v.is(Value::Type::Callable) || v.is_undefined(); }

// x % n == r with Python's modulo, for the odd/even/divisibleby tests (ints and floats).
bool mod_is(const Value& v, const Value& n, int64_t r, const char* test) {
  const bool nums = (v.is_number() || v.is(Value::Type::Bool)) && (n.is_number() || n.is(Value::Type::Bool));
  if (!nums) throw RenderError(str_cat("the '", test, "' test needs numbers, not ", type_name(v)));
  if (v.is(Value::Type::Float) || n.is(Value::Type::Float)) {
    const double d = n.as_double();
    if (d == 0.0) throw RenderError("float modulo by zero");
    double m = std::fmod(v.as_double(), d);
    if (m != 0 && ((m < 0) != (d < 0))) m += d;
    return m == static_cast<double>(r);
  }
  const int64_t d = n.as_int();
  if (d == 0) throw RenderError("integer division or modulo by zero");
  if (d == -1) return r == 0;
  int64_t m = v.as_int() % d;
  if (m != 0 && ((m < 0) != (d < 0))) m += d;
  return m == r;
}
bool t_odd(const Value& v, CallArgs&) { return mod_is(v, Value::integer(2), 1, "odd"); }
bool t_even(const Value& v, CallArgs&) { return mod_is(v, Value::integer(2), 0, "even"); }
bool t_divisibleby(const Value& v, CallArgs& a) {
  const Value* n = arg(a, 0, "num");
  if (!n) throw RenderError("divisibleby needs a number");
  return mod_is(v, *n, 0, "divisibleby");
}

const Value& other(CallArgs& a) {
  const Value* o = arg(a, 0, "other");
  if (!o) throw RenderError("the test needs a value to compare with");
  return *o;
}
bool t_eq(const Value& v, CallArgs& a) { return equals(v, other(a)); }
bool t_ne(const Value& v, CallArgs& a) { return !equals(v, other(a)); }
bool t_lt(const Value& v, CallArgs& a) { return compare(v, other(a)) < 0; }
bool t_le(const Value& v, CallArgs& a) { return compare(v, other(a)) <= 0; }
bool t_gt(const Value& v, CallArgs& a) { return compare(v, other(a)) > 0; }
bool t_ge(const Value& v, CallArgs& a) { return compare(v, other(a)) >= 0; }
bool t_in(const Value& v, CallArgs& a) {
  const Value& seq = other(a);
  if (seq.is(Value::Type::String)) {
    if (!v.is(Value::Type::String)) throw RenderError("'in <string>' requires string as left operand");
    return seq.str().find(v.str()) != std::string::npos;
  }
  for (const Value& x : iterate(seq)) {
    if (equals(x, v)) return true;
  }
  return false;
}
bool t_sameas(const Value& v, CallArgs& a) {
  const Value& o = other(a);  // identity: exact for None/True/False, the cases templates use
  if (v.type() != o.type()) return false;
  if (v.is(Value::Type::None) || v.is(Value::Type::Undefined)) return true;
  if (v.is(Value::Type::Bool)) return v.as_bool() == o.as_bool();
  return false;
}
// str.islower()/isupper() on ASCII: some cased letter, none of the other case.
bool has_case(const std::string& s, bool upper) {
  bool any = false;
  for (unsigned char c : s) {
    if (upper ? std::islower(c) : std::isupper(c)) return false;
    any = any || (upper ? std::isupper(c) : std::islower(c));
  }
  return any;
}
bool t_lower(const Value& v, CallArgs&) { return has_case(to_text(v).s, false); }
bool t_upper(const Value& v, CallArgs&) { return has_case(to_text(v).s, true); }

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::map<std::string, FilterFn> filters = {
      {"trim", f_trim},         {"length", f_length},       {"count", f_length},
      {"tojson", f_tojson},     {"upper", f_upper},         {"lower", f_lower},
      {"capitalize", f_capitalize}, {"title", f_title},     {"default", f_default},
      {"d", f_default},         {"first", f_first},         {"last", f_last},
      {"join", f_join},         {"replace", f_replace},     {"items", f_items},
      {"string", f_string},     {"safe", f_safe},           {"list", f_list},
      {"int", f_int},           {"float", f_float},         {"abs", f_abs},
      {"reverse", f_reverse},   {"select", f_select},       {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"map", f_map},
      {"indent", f_indent},
  };
  auto it = filters.find(name);
  return it == filters.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  static const std::map<std::string, TestFn> tests = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean},   {"true", t_true},           {"false", t_false},
      {"integer", t_integer},   {"float", t_float},         {"number", t_number},
      {"string", t_string},     {"mapping", t_mapping},     {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"odd", t_odd},
      {"even", t_even},         {"divisibleby", t_divisibleby}, {"eq", t_eq},
      {"equalto", t_eq},        {"==", t_eq},               {"ne", t_ne},
      {"!=", t_ne},             {"lt", t_lt},               {"lessthan", t_lt},
      {"<", t_lt},              {"le", t_le},               {"<=", t_le},
      {"gt", t_gt},             {"greaterthan", t_gt},      {">", t_gt},
      {"ge", t_ge},             {">=", t_ge},               {"in", t_in},
      {"sameas", t_sameas},     {"lower", t_lower},         {"upper", t_upper},
  };
  auto it = tests.find(name);
  return it == tests.end() ? nullptr : it->second;
}

}  // namespace flashserve::jinja
