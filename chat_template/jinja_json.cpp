// The tojson filter as transformers defines it: Python's json.dumps(x, ensure_ascii=False,
// indent=..., sort_keys=...). Byte-exact with Python: ", " and ": " separators without indent,
// "," and ": " with it; floats as repr(); non-ASCII text unescaped.
#include <algorithm>
#include <cstdio>

#include "chat_template/jinja_builtins.h"
#include "core/error.h"
#include "core/json_text.h"

namespace flashserve::jinja {
namespace {

void quote(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (!append_json_escape(out, static_cast<unsigned char>(c))) out += c;
  }
  out += '"';
}

// json.dumps turns non-string keys into strings: True -> "true", 1 -> "1", None -> "null".
std::string key_string(const Value& k) {
  switch (k.type()) {
    case Value::Type::String: return k.str();
    case Value::Type::Bool: return k.as_bool() ? "true" : "false";
    case Value::Type::Int: return std::to_string(k.as_int());
    case Value::Type::Float: return repr_float(k.as_double());
    case Value::Type::None: return "null";
    default:
      throw RenderError(str_cat("keys must be str, int, float, bool or None, not ", type_name(k)));
  }
}

void dump(std::string& out, const Value& v, int indent, bool sort_keys, int level) {
  if (level > 200) throw RenderError("tojson: value nested too deeply");
  auto newline = [&](int lvl) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent) * lvl, ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.type()) {
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: {
      const double f = v.as_double();
      out += f != f ? "NaN" : f == 1.0 / 0.0 ? "Infinity" : f == -1.0 / 0.0 ? "-Infinity" : repr_float(f);
      return;
    }
    case Value::Type::String: quote(out, v.str()); return;
    case Value::Type::List: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.items().size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        dump(out, v.items()[k], indent, sort_keys, level + 1);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Type::Dict: {
      if (v.mapping().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, x] : v.mapping().items) entries.emplace_back(key_string(k), &x);
      if (sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t k = 0; k < entries.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        quote(out, entries[k].first);
        out += ": ";
        dump(out, *entries[k].second, indent, sort_keys, level + 1);
      }
      newline(level);
      out += '}';
      return;
    }
    default:
      throw RenderError(str_cat("Object of type ", type_name(v), " is not JSON serializable"));
  }
}

}  // namespace

std::string to_json(const Value& v, int indent, bool sort_keys) {
  std::string out;
  dump(out, v, indent, sort_keys, 0);
  return out;
}

}  // namespace flashserve::jinja
