// The named things a template can use besides its own variables: filters (`x | trim`), tests
// (`x is defined`), methods of str and dict (`s.strip()`, `d.items()`), tojson, and the globals
// range/namespace/dict. The parser asks find_filter/find_test so that an unknown name fails when
// the template is loaded.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "chat_template/jinja_value.h"

namespace flashserve::jinja {

using FilterFn = Value (*)(const Value& input, CallArgs& args);
using TestFn = bool (*)(const Value& input, CallArgs& args);

FilterFn find_filter(const std::string& name);  // nullptr when unknown
TestFn find_test(const std::string& name);      // nullptr when unknown

// obj.name as jinja2 resolves a method: a callable bound to obj, or Undefined.
Value find_method(const Value& obj, const std::string& name);

// json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys) with Python's default
// separators; indent < 0 means None. RenderError for values JSON cannot hold (Undefined).
std::string to_json(const Value& v, int indent, bool sort_keys);

// range(), namespace() and dict(): the globals every template gets.
std::vector<std::pair<std::string, Value>> builtin_globals();

// Argument helpers for filters, methods and globals: positional index `i` or keyword `name`.
const Value* arg(CallArgs& args, size_t i, const char* name);
// Python's str.strip family: which = 'b' both, 'l' left, 'r' right; chars null = whitespace.
Text strip_text(const Text& t, char which, const std::string* chars);

}  // namespace flashserve::jinja
