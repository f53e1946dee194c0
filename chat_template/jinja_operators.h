// Python's operator semantics on template values: unary and binary operators (arithmetic on
// int64 with overflow refused, comparison, `in`, `~`, sequence repetition), attribute and item
// lookup as jinja2 resolves them, and slicing. The renderer evaluates the operands; these compute
// the result, paying `budget` for what they build.
#pragma once

#include <cstdint>
#include <string>

#include "chat_template/jinja_budget.h"
#include "chat_template/jinja_value.h"

namespace flashserve::jinja {

// op: "not", "-" or "+".
Value unary_op(const std::string& op, const Value& v);

// Every binary operator of Expr::Kind::Binary but `and`/`or`, which the renderer short-circuits.
Value binary_op(const std::string& op, const Value& a, const Value& b, Budget& budget);

// obj.name: a method first (d.items is the method), then a key, as jinja2's getattr.
Value get_attr(const Value& obj, const std::string& name);

// obj[key]: a key or index first, then a method, as jinja2's getitem.
Value get_item(const Value& obj, const Value& key);

// obj[start:stop:step] with Python's negative indices and steps, on lists and strings; bounds
// are {start, stop, step}, each used only where `given`.
Value slice_value(const Value& obj, const int64_t bounds[3], const bool given[3], Budget& budget);

}  // namespace flashserve::jinja
