// Value semantics for the chat template interpreter: Python's truthiness, str(), repr(), ==,
// ordering, and the literal-range bookkeeping of Text.
#include "chat_template/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace flashserve::jinja {

// ---- Text ----

Text Text::all_literal(std::string str) {
  Text t(std::move(str));
  if (!t.s.empty()) t.literal.push_back({0, t.s.size()});
  return t;
}

void Text::append(const Text& other) {
  const size_t shift = s.size();
  s += other.s;
  for (auto [b, e] : other.literal) {
    if (!literal.empty() && literal.back().second == b + shift) {
      literal.back().second = e + shift;  // merge touching ranges
    } else {
      literal.push_back({b + shift, e + shift});
    }
  }
}

void Text::append(std::string_view plain) { s += plain; }

Text Text::substr(size_t begin, size_t end) const {
  Text t(s.substr(begin, end - begin));
  for (auto [b, e] : literal) {
    const size_t lo = std::max(b, begin), hi = std::min(e, end);
    if (lo < hi) t.literal.push_back({lo - begin, hi - begin});
  }
  return t;
}

Text Text::derived(std::string result, bool any_literal) {
  return any_literal ? all_literal(std::move(result)) : Text(std::move(result));
}

// ---- Dict ----

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

// ---- UTF-8 ----

uint32_t decode_code_point(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = n == 1 ? c : c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc >> 6) != 2) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += n;
  return cp;
}

void append_code_point(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<size_t> code_point_starts(std::string_view s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size();) {
    starts.push_back(i);
    decode_code_point(s, i);
  }
  return starts;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) decode_code_point(s, i);
  return n;
}

bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// ---- Python semantics ----

const char* type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::None: return "NoneType";
    case Value::Type::Bool: return "bool";
    case Value::Type::Int: return "int";
    case Value::Type::Float: return "float";
    case Value::Type::String: return "str";
    case Value::Type::List: return "list";
    case Value::Type::Dict: return "dict";
    case Value::Type::Namespace: return "Namespace";
    case Value::Type::Callable: return "function";
  }
  return "?";
}

void require_defined(const Value& v) {
  if (v.is_undefined()) throw RenderError(v.hint().empty() ? "value is undefined" : v.hint());
}

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return false;
    case Value::Type::Bool:
    case Value::Type::Int: return v.as_int() != 0;
    case Value::Type::Float: return v.as_double() != 0.0;
    case Value::Type::String: return !v.str().empty();
    case Value::Type::List: return !v.items().empty();
    case Value::Type::Dict: return !v.mapping().items.empty();
    case Value::Type::Namespace:
    case Value::Type::Callable: return true;
  }
  return false;
}

std::string repr_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: fixed for exponents in [-4, 16), else
  // scientific with a signed two-digit exponent; fixed always shows a fractional part.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  const size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(epos + 1));
  const int decpt = exp10 + 1;  // digits d1 d2 ... with the point after decpt of them
  std::string out = neg ? "-" : "";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out.append(digits, 0, decpt);
      out += '.';
      out.append(digits, decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += e;
  }
  return out;
}

namespace {

bool printable(uint32_t cp) {
  if (cp == ' ') return true;
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (is_python_space(cp)) return false;
  return !((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF);
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = decode_code_point(s, i);
    if (cp == '\\' || cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!printable(cp)) {
      char buf[16];
      std::snprintf(buf, sizeof buf, cp < 0x100 ? "\\x%02x" : "\\u%04x", cp);
      out += buf;
    } else {
      append_code_point(out, cp);
    }
  }
  return out + quote;
}

bool has_literal(const Value& v) {
  switch (v.type()) {
    case Value::Type::String: return v.text().any_literal();
    case Value::Type::List:
      for (const auto& x : v.items()) {
        if (has_literal(x)) return true;
      }
      return false;
    case Value::Type::Dict:
    case Value::Type::Namespace:
      for (const auto& [k, x] : v.mapping().items) {
        if (has_literal(k) || has_literal(x)) return true;
      }
      return false;
    default: return false;
  }
}

std::string repr_mapping(const Dict& d) {
  std::string out = "{";
  for (size_t i = 0; i < d.items.size(); ++i) {
    if (i) out += ", ";
    out += repr(d.items[i].first) + ": " + repr(d.items[i].second);
  }
  return out + "}";
}

}  // namespace

std::string repr(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::None: return "None";
    case Value::Type::Bool: return v.as_bool() ? "True" : "False";
    case Value::Type::Int: return std::to_string(v.as_int());
    case Value::Type::Float: return repr_float(v.as_double());
    case Value::Type::String: return repr_string(v.str());
    case Value::Type::List: {
      std::string out = v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out += ", ";
        out += repr(v.items()[i]);
      }
      if (v.is_tuple()) return out + (v.items().size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Type::Dict: return repr_mapping(v.mapping());
    case Value::Type::Namespace: return "<Namespace " + repr_mapping(v.mapping()) + ">";
    case Value::Type::Callable: return "<function " + v.hint() + ">";
  }
  return "";
}

Text to_text(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return Text();
    case Value::Type::String: return v.text();
    default: return Text::derived(repr(v), has_literal(v));
  }
}

void check_list_size(size_t n) {
  if (n > kMaxListItems) throw RenderError("list too long for a chat template");
}

List iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::List: return v.items();
    case Value::Type::Dict: {
      List keys;
      for (const auto& [k, x] : v.mapping().items) keys.push_back(k);
      return keys;
    }
    case Value::Type::String: {
      List chars;
      const auto starts = code_point_starts(v.str());
      check_list_size(starts.size());
      for (size_t k = 0; k < starts.size(); ++k) {
        const size_t end = k + 1 < starts.size() ? starts[k + 1] : v.str().size();
        chars.push_back(Value::string(v.text().substr(starts[k], end)));
      }
      return chars;
    }
    default: throw RenderError(std::string("'") + type_name(v) + "' object is not iterable");
  }
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    c = static_cast<char>(upper ? std::toupper(u) : std::tolower(u));
  }
  return s;
}

bool equals(const Value& a, const Value& b) {
  using T = Value::Type;
  const bool an = a.is_number() || a.is(T::Bool), bn = b.is_number() || b.is(T::Bool);
  if (an && bn) {
    if (a.is(T::Float) || b.is(T::Float)) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::Undefined:
    case T::None: return true;
    case T::String: return a.str() == b.str();
    case T::List:
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!equals(a.items()[i], b.items()[i])) return false;
      }
      return true;
    case T::Dict: {
      const auto& x = a.mapping().items;
      if (x.size() != b.mapping().items.size()) return false;
      for (const auto& [k, val] : x) {
        const Value* other = b.mapping().find(k);
        if (!other || !equals(val, *other)) return false;
      }
      return true;
    }
    case T::Namespace: return &a.mapping() == &b.mapping();
    default: return false;  // callables: never equal (identity is not tracked)
  }
}

int compare(const Value& a, const Value& b) {
  using T = Value::Type;
  const bool an = a.is_number() || a.is(T::Bool), bn = b.is_number() || b.is(T::Bool);
  if (an && bn) {
    if (a.is(T::Float) || b.is(T::Float)) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
  }
  if (a.is(T::String) && b.is(T::String)) {
    const int c = a.str().compare(b.str());  // byte order of UTF-8 = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is(T::List) && b.is(T::List)) {
    const auto &x = a.items(), &y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw RenderError(std::string("cannot compare '") + type_name(a) + "' with '" + type_name(b) +
                    "'");
}

}  // namespace flashserve::jinja
