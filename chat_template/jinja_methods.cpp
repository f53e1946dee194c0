// Methods of Python's str and dict that templates call (`content.strip()`, `message.get('x')`,
// `tool.items()`), bound to their object when looked up. The immutable sandbox transformers uses
// forbids the mutating ones (list.append, dict.update), so they are simply absent here.
#include <algorithm>

#include "chat_template/jinja_builtins.h"
#include "core/error.h"

namespace flashserve::jinja {

const Value* arg(CallArgs& args, size_t i, const char* name) {
  if (i < args.positional.size()) return &args.positional[i];
  for (auto& [k, v] : args.keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

namespace {

const std::string& string_arg(CallArgs& args, size_t i, const char* name, const char* method) {
  const Value* v = arg(args, i, name);
  if (!v || !v->is(Value::Type::String)) {
    throw RenderError(str_cat(method, "() argument ", i + 1, " must be str"));
  }
  return v->str();
}

// Which code points of `chars` (or whitespace when null) may be stripped.
bool strippable(uint32_t cp, const std::string* chars) {
  if (!chars) return is_python_space(cp);
  for (size_t i = 0; i < chars->size();) {
    if (decode_code_point(*chars, i) == cp) return true;
  }
  return false;
}

}  // namespace

Text strip_text(const Text& t, char which, const std::string* chars) {
  const auto starts = code_point_starts(t.s);
  size_t first = 0, last = starts.size();  // keep code points [first, last)
  auto cp_at = [&](size_t k) {
    size_t i = starts[k];
    return decode_code_point(t.s, i);
  };
  if (which != 'r') {
    while (first < last && strippable(cp_at(first), chars)) ++first;
  }
  if (which != 'l') {
    while (last > first && strippable(cp_at(last - 1), chars)) --last;
  }
  const size_t begin = first < starts.size() ? starts[first] : t.s.size();
  const size_t end = last < starts.size() ? starts[last] : t.s.size();
  return t.substr(begin, end);
}

namespace {

// str.title(): a letter after a non-letter starts a word.
std::string python_title(const std::string& s) {
  std::string out = s;
  bool prev_letter = false;
  for (char& c : out) {
    const bool letter = std::isalpha(static_cast<unsigned char>(c));
    c = letter ? (prev_letter ? std::tolower(static_cast<unsigned char>(c))
                              : std::toupper(static_cast<unsigned char>(c)))
               : c;
    prev_letter = letter;
  }
  return out;
}

// str.split(sep=None, maxsplit=-1). Each piece is cut from the original, keeping its ranges.
List split(const Text& t, const std::string* sep, int64_t maxsplit) {
  List out;
  const std::string& s = t.s;
  if (sep) {
    if (sep->empty()) throw RenderError("empty separator");
    size_t start = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      const size_t hit = s.find(*sep, start);
      if (hit == std::string::npos) break;
      out.push_back(Value::string(t.substr(start, hit)));
      check_list_size(out.size());
      start = hit + sep->size();
    }
    out.push_back(Value::string(t.substr(start, s.size())));
    return out;
  }
  const auto starts = code_point_starts(s);
  auto space_at = [&](size_t k) {
    size_t i = starts[k];
    return is_python_space(decode_code_point(s, i));
  };
  auto byte = [&](size_t k) { return k < starts.size() ? starts[k] : s.size(); };
  size_t k = 0;
  int64_t n = 0;
  while (true) {
    while (k < starts.size() && space_at(k)) ++k;
    if (k == starts.size()) break;
    if (maxsplit >= 0 && n == maxsplit) {  // the rest, trailing whitespace stripped
      size_t end = starts.size();
      while (end > k && space_at(end - 1)) --end;
      out.push_back(Value::string(t.substr(byte(k), byte(end))));
      break;
    }
    size_t j = k;
    while (j < starts.size() && !space_at(j)) ++j;
    out.push_back(Value::string(t.substr(byte(k), byte(j))));
    check_list_size(out.size());
    ++n;
    k = j;
  }
  return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    return a.size() <= s.size() &&
           s.compare(prefix ? 0 : s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is(Value::Type::String)) return one(affix.str());
  if (affix.is(Value::Type::List)) {
    for (const Value& a : affix.items()) {
      if (!a.is(Value::Type::String)) throw RenderError("startswith/endswith takes strings");
      if (one(a.str())) return true;
    }
    return false;
  }
  throw RenderError("startswith/endswith takes a string or a tuple of strings");
}

Value string_method(const Value& self, const std::string& name) {
  const Text& t = self.text();
  auto bind = [&](Function fn) { return Value::callable("str." + name, std::move(fn)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const char which = name[0] == 's' ? 'b' : name[0];
    return bind([t, which](CallArgs& a) {
      const Value* chars = arg(a, 0, "chars");
      const bool given = chars && !chars->is(Value::Type::None);
      if (given && !chars->is(Value::Type::String)) throw RenderError("strip arg must be str");
      return Value::string(strip_text(t, which, given ? &chars->str() : nullptr));
    });
  }
  if (name == "upper" || name == "lower") {
    const bool upper = name == "upper";
    return bind([t, upper](CallArgs&) {
      return Value::string(Text::derived(ascii_case(t.s, upper), t.any_literal()));
    });
  }
  if (name == "title") {
    return bind([t](CallArgs&) {
      return Value::string(Text::derived(python_title(t.s), t.any_literal()));
    });
  }
  if (name == "capitalize") {
    return bind([t](CallArgs&) {
      std::string s = ascii_case(t.s, false);
      if (!s.empty()) s[0] = std::toupper(static_cast<unsigned char>(s[0]));
      return Value::string(Text::derived(std::move(s), t.any_literal()));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return bind([t, prefix](CallArgs& a) {
      const Value* affix = arg(a, 0, "prefix");
      if (!affix) throw RenderError("startswith/endswith takes one argument");
      return Value::boolean(affix_match(t.s, *affix, prefix));
    });
  }
  if (name == "split") {
    return bind([t](CallArgs& a) {
      const Value* sep = arg(a, 0, "sep");
      const Value* max = arg(a, 1, "maxsplit");
      const bool has_sep = sep && !sep->is(Value::Type::None);
      if (has_sep && !sep->is(Value::Type::String)) throw RenderError("split sep must be str");
      if (max && !max->is(Value::Type::Int)) throw RenderError("split maxsplit must be int");
      return Value::list(split(t, has_sep ? &sep->str() : nullptr, max ? max->as_int() : -1));
    });
  }
  if (name == "replace") {
    return bind([t](CallArgs& a) {
      const std::string& from = string_arg(a, 0, "old", "replace");
      const std::string& to = string_arg(a, 1, "new", "replace");
      const Value* count = arg(a, 2, "count");
      int64_t left = count && count->is(Value::Type::Int) ? count->as_int() : -1;
      std::string out;
      size_t start = 0;
      if (from.empty()) {  // Python inserts `to` around every code point
        for (size_t i : code_point_starts(t.s)) {
          if (left == 0) break;
          out += t.s.substr(start, i - start) + to;
          start = i;
          --left;
        }
        out += t.s.substr(start);
        if (left != 0) out += to;
      } else {
        for (size_t hit; left != 0 && (hit = t.s.find(from, start)) != std::string::npos; --left) {
          out += t.s.substr(start, hit - start) + to;
          start = hit + from.size();
        }
        out += t.s.substr(start);
      }
      if (out.size() > (64u << 20)) throw RenderError("replace result too large");
      return Value::string(Text::derived(std::move(out), t.any_literal()));
    });
  }
  if (name == "find" || name == "count") {
    const bool find = name == "find";
    return bind([t, find](CallArgs& a) {
      const std::string& needle = string_arg(a, 0, "sub", find ? "find" : "count");
      if (find) {
        const size_t hit = t.s.find(needle);
        return Value::integer(hit == std::string::npos
                                  ? -1
                                  : static_cast<int64_t>(code_point_count(t.s.substr(0, hit))));
      }
      if (needle.empty()) return Value::integer(static_cast<int64_t>(code_point_count(t.s)) + 1);
      int64_t n = 0;
      for (size_t p = t.s.find(needle); p != std::string::npos; p = t.s.find(needle, p + needle.size())) ++n;
      return Value::integer(n);
    });
  }
  if (name == "join") {
    return bind([t](CallArgs& a) {
      const Value* items = arg(a, 0, "iterable");
      if (!items || !items->is(Value::Type::List)) throw RenderError("join takes a list");
      Text out;
      for (size_t k = 0; k < items->items().size(); ++k) {
        const Value& x = items->items()[k];
        if (!x.is(Value::Type::String)) {
          throw RenderError(str_cat("sequence item ", k, ": expected str instance, ",
                                    type_name(x), " found"));
        }
        if (k) out.append(t);
        out.append(x.text());
      }
      return Value::string(std::move(out));
    });
  }
  return Value();
}

Value dict_method(const Value& self, const std::string& name) {
  auto bind = [&](Function fn) { return Value::callable("dict." + name, std::move(fn)); };
  if (name == "items" || name == "keys" || name == "values") {
    const int part = name == "items" ? 0 : name == "keys" ? 1 : 2;
    return bind([self, part](CallArgs&) {
      List out;
      for (const auto& [k, v] : self.mapping().items) {
        out.push_back(part == 0 ? Value::tuple({k, v}) : part == 1 ? k : v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return bind([self](CallArgs& a) {
      const Value* key = arg(a, 0, "key");
      if (!key) throw RenderError("get expected at least 1 argument");
      if (const Value* v = self.mapping().find(*key)) return *v;
      const Value* dflt = arg(a, 1, "default");
      return dflt ? *dflt : Value::none();
    });
  }
  return Value();
}

// The non-mutating list methods (the sandbox refuses append, pop, ...).
Value list_method(const Value& self, const std::string& name) {
  if (name != "count" && name != "index") return Value();
  const bool count = name == "count";
  return Value::callable("list." + name, [self, count](CallArgs& a) -> Value {
    const Value* x = arg(a, 0, "value");
    if (!x) throw RenderError("list.count/index takes one argument");
    int64_t n = 0;
    for (size_t i = 0; i < self.items().size(); ++i) {
      if (!equals(self.items()[i], *x)) continue;
      if (!count) return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (!count) throw RenderError(str_cat(repr(*x), " is not in list"));
    return Value::integer(n);
  });
}

}  // namespace

Value find_method(const Value& obj, const std::string& name) {
  if (obj.is(Value::Type::String)) return string_method(obj, name);
  if (obj.is(Value::Type::List)) return list_method(obj, name);
  if (obj.is(Value::Type::Dict)) return dict_method(obj, name);
  return Value();
}

}  // namespace flashserve::jinja
