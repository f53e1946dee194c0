// Python's operator semantics on template values (see jinja_operators.h). Integers are int64 and
// refuse what would overflow; strings index and slice by code point, keeping literal ranges.
#include "chat_template/jinja_operators.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "chat_template/jinja_builtins.h"
#include "core/error.h"

namespace flashserve::jinja {
namespace {

// Python's integer arithmetic on int64, refusing what would overflow.
int64_t checked(char op, int64_t x, int64_t y) {
  int64_t r = 0;
  const bool overflow = op == '+'   ? __builtin_add_overflow(x, y, &r)
                        : op == '-' ? __builtin_sub_overflow(x, y, &r)
                                    : __builtin_mul_overflow(x, y, &r);
  if (overflow) throw RenderError("integer overflow");
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw RenderError("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) throw RenderError("integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == 0) throw RenderError("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw RenderError(str_cat("unsupported operand type(s) for ", op, ": '", type_name(a), "' and '",
                            type_name(b), "'"));
}

bool numeric(const Value& v) { return v.is_number() || v.is(Value::Type::Bool); }

Value missing(const Value& obj, const std::string& what) {
  return Value::undefined(str_cat("'", type_name(obj), " object' has no attribute ", what));
}

// seq * times for a string or list, refusing a result past the size limits.
Value repeat(const Value& seq, int64_t times, Budget& budget) {
  times = std::max<int64_t>(times, 0);
  const bool is_list = seq.is(Value::Type::List);
  const size_t unit = is_list ? seq.items().size() : seq.str().size();
  const size_t limit = is_list ? kMaxListItems : budget.limits().max_text_bytes;
  if (unit != 0 && static_cast<uint64_t>(times) > limit / unit) {
    throw RenderError("repeated value too large");
  }
  budget.charge(unit * times / 256);
  if (seq.is(Value::Type::List)) {
    List items;
    for (int64_t k = 0; k < times; ++k) items.insert(items.end(), seq.items().begin(), seq.items().end());
    return Value::list(std::move(items));
  }
  Text t;
  for (int64_t k = 0; k < times; ++k) t.append(seq.text());
  return Value::string(std::move(t));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  const bool floats = a.is(Value::Type::Float) || b.is(Value::Type::Float);
  if (op == "/") {
    if (b.as_double() == 0.0) throw RenderError("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (floats) {
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0.0) throw RenderError("float division or modulo by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") {
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::number(r == 0 ? std::copysign(0.0, y) : r);  // Python: the divisor's sign
    }
  } else {
    const int64_t x = a.as_int(), y = b.as_int();
    if (op == "+" || op == "-" || op == "*") return Value::integer(checked(op[0], x, y));
    if (op == "//") return Value::integer(floor_div(x, y));
    if (op == "%") return Value::integer(py_mod(x, y));
    if (op == "**") {
      if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      if (x == 0 || x == 1) return Value::integer(y == 0 ? 1 : x);
      if (x == -1) return Value::integer(y % 2 ? -1 : 1);
      int64_t result = 1;
      for (int64_t k = 0; k < y; ++k) result = checked('*', result, x);  // |x| >= 2: < 64 steps
      return Value::integer(result);
    }
  }
  bad_operands(op, a, b);
}

// Python's `item in container`.
bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined: return false;
    case Value::Type::String:
      if (!item.is(Value::Type::String)) {
        throw RenderError(str_cat("'in <string>' requires string as left operand, not ",
                                  type_name(item)));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::List:
      for (const Value& x : container.items()) {
        if (equals(x, item)) return true;
      }
      return false;
    case Value::Type::Dict: return container.mapping().find(item) != nullptr;
    default:
      throw RenderError(str_cat("argument of type '", type_name(container),
                                "' is not iterable"));
  }
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  Value m = find_method(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_mapping()) {
    if (const Value* v = obj.mapping().find(Value::string(name))) return *v;
  }
  return missing(obj, "'" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_mapping()) {
    if (const Value* v = obj.mapping().find(key)) return *v;
  } else if ((obj.is(Value::Type::List) || obj.is(Value::Type::String)) &&
             (key.is(Value::Type::Int) || key.is(Value::Type::Bool))) {
    if (obj.is(Value::Type::List)) {
      const int64_t n = static_cast<int64_t>(obj.items().size());
      int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
      if (i >= 0 && i < n) return obj.items()[i];
    } else {
      const auto starts = code_point_starts(obj.str());
      const int64_t n = static_cast<int64_t>(starts.size());
      int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
      if (i >= 0 && i < n) {
        const size_t end = i + 1 < n ? starts[i + 1] : obj.str().size();
        return Value::string(obj.text().substr(starts[i], end));
      }
    }
  }
  if (key.is(Value::Type::String)) {
    Value m = find_method(obj, key.str());
    if (!m.is_undefined()) return m;
  }
  return missing(obj, key.is(Value::Type::String) ? "'" + key.str() + "'" : repr(key));
}

Value slice_value(const Value& obj, const int64_t bounds[3], const bool given[3], Budget& budget) {
  require_defined(obj);
  const bool is_list = obj.is(Value::Type::List);
  if (!is_list && !obj.is(Value::Type::String)) {  // jinja2 falls back to Undefined
    return Value::undefined(str_cat("'", type_name(obj), " object' has no attribute slice"));
  }
  const std::vector<size_t> starts = is_list ? std::vector<size_t>() : code_point_starts(obj.str());
  const int64_t n = static_cast<int64_t>(is_list ? obj.items().size() : starts.size());
  const int64_t step = bounds[2];
  if (step == 0) throw RenderError("slice step cannot be zero");
  auto clamp = [&](int64_t i, bool has, int64_t dflt) {
    if (!has) return dflt;
    if (i < 0) i = std::max<int64_t>(i + n, step < 0 ? -1 : 0);
    return std::min<int64_t>(i, step < 0 ? n - 1 : n);
  };
  const int64_t start = clamp(bounds[0], given[0], step < 0 ? n - 1 : 0);
  const int64_t stop = clamp(bounds[1], given[1], step < 0 ? -1 : n);
  std::vector<int64_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) picked.push_back(i);
  budget.charge(picked.size() / 16);
  if (is_list) {
    List out;
    for (int64_t i : picked) out.push_back(obj.items()[i]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (step == 1) {  // one contiguous byte range
    if (picked.empty()) return Value::string("");
    const size_t end = stop < n ? starts[stop] : obj.str().size();
    return Value::string(obj.text().substr(starts[start], end));
  }
  Text out;
  for (int64_t i : picked) {
    const size_t end = i + 1 < n ? starts[i + 1] : obj.str().size();
    out.append(obj.text().substr(starts[i], end));
  }
  return Value::string(std::move(out));
}

Value unary_op(const std::string& op, const Value& v) {
  if (op == "not") return Value::boolean(!truthy(v));
  require_defined(v);
  if (!numeric(v)) {
    throw RenderError(str_cat("bad operand type for unary ", op, ": '", type_name(v), "'"));
  }
  if (op == "+") return v.is(Value::Type::Bool) ? Value::integer(v.as_int()) : v;
  if (v.is(Value::Type::Float)) return Value::number(-v.as_double());
  return Value::integer(checked('-', 0, v.as_int()));
}

Value binary_op(const std::string& op, const Value& a, const Value& b, Budget& budget) {
  if (op == "~") {
    Text t = to_text(a);
    t.append(to_text(b));
    return Value::string(std::move(t));
  }
  if (op == "==") return Value::boolean(equals(a, b));
  if (op == "!=") return Value::boolean(!equals(a, b));
  if (op == "in" || op == "notin") return Value::boolean(contains(b, a) == (op == "in"));
  require_defined(a);
  require_defined(b);
  if (op == "<") return Value::boolean(compare(a, b) < 0);
  if (op == "<=") return Value::boolean(compare(a, b) <= 0);
  if (op == ">") return Value::boolean(compare(a, b) > 0);
  if (op == ">=") return Value::boolean(compare(a, b) >= 0);
  if (numeric(a) && numeric(b)) return arithmetic(op, a, b);
  if (op == "+" && a.type() == b.type() && a.is(Value::Type::String)) {
    Text t = a.text();
    t.append(b.text());
    return Value::string(std::move(t));
  }
  if (op == "+" && a.is(Value::Type::List) && b.is(Value::Type::List)) {
    List items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    return Value::list(std::move(items));
  }
  if (op == "*" && (a.is(Value::Type::Int) || b.is(Value::Type::Int))) {
    const Value& seq = a.is(Value::Type::Int) ? b : a;
    const int64_t times = a.is(Value::Type::Int) ? a.as_int() : b.as_int();
    if (seq.is(Value::Type::String) || seq.is(Value::Type::List)) return repeat(seq, times, budget);
  }
  bad_operands(op, a, b);
}

}  // namespace flashserve::jinja
