// The tree-walking renderer: statements write Text (with literal ranges) to an output, expressions
// evaluate to Value with Python's operator semantics. Globals every template gets (range,
// namespace, dict) live here; the caller adds its own (raise_exception, messages...).
#include "chat_template/jinja_eval.h"

#include <cmath>
#include <limits>

#include "chat_template/jinja_builtins.h"
#include "core/error.h"

namespace flashserve::jinja {
namespace {

// One level of variables; lookups walk outwards through `parent`.
struct Scope {
  const Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it) {
        if (it->first == name) return &it->second;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { Normal, Break, Continue };

// A loop iteration costs about as much as this many expression steps (the loop variable).
constexpr size_t kIterationSteps = 8;

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

class Renderer {
 public:
  Renderer(const Variables& variables, const Limits& limits) : limits_(limits) {
    globals_.vars = variables;
    add_builtin_globals();
    root_.parent = &globals_;
  }

  Text run(const Body& body) {
    Text out;
    try {
      exec_body(body, root_, out);
    } catch (const RenderError& e) {
      throw RenderError(str_cat("line ", line_, ": ", e.what()));
    }
    return out;
  }

 private:
  // ---- bookkeeping ----

  void charge(size_t steps) {
    steps_ += steps;
    if (steps_ > limits_.max_steps) throw RenderError("template exceeded its work limit");
  }
  void check_size(const Text& t) const {
    if (t.s.size() > limits_.max_text_bytes) throw RenderError("template output too large");
  }
  struct DepthGuard {
    Renderer& r;
    explicit DepthGuard(Renderer& renderer) : r(renderer) {
      if (r.depth_ >= r.limits_.max_depth) throw RenderError("template nested too deeply");
      ++r.depth_;
    }
    ~DepthGuard() { --r.depth_; }
  };

  void write(Text& out, const Text& t) {
    out.append(t);
    charge(t.s.size() / 256);
    check_size(out);
  }

  // ---- statements ----

  Flow exec_body(const Body& body, Scope& scope, Text& out) {
    for (const Stmt& s : body) {
      const Flow f = exec(s, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& s, Scope& scope, Text& out) {
    DepthGuard guard(*this);
    line_ = s.line;
    charge(1);
    switch (s.kind) {
      case Stmt::Kind::Text: write(out, Text(s.text)); return Flow::Normal;
      case Stmt::Kind::Output: write(out, to_text(eval(*s.expr, scope))); return Flow::Normal;
      case Stmt::Kind::If:
        for (const Branch& b : s.branches) {
          if (truthy(eval(*b.condition, scope))) return exec_body(b.body, scope, out);
        }
        return exec_body(s.else_body, scope, out);
      case Stmt::Kind::For: return exec_for(s, scope, out);
      case Stmt::Kind::Set: exec_set(s, scope); return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        Text captured;
        exec_body(s.body, scope, captured);
        scope.set(s.targets[0], Value::string(std::move(captured)));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: scope.set(s.name, make_macro(s, scope)); return Flow::Normal;
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
      case Stmt::Kind::Block: return exec_body(s.body, scope, out);
    }
    return Flow::Normal;
  }

  static void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    if (!v.is(Value::Type::List) || v.items().size() != targets.size()) {
      throw RenderError(str_cat("cannot unpack '", type_name(v), "' into ", targets.size(),
                                " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], v.items()[i]);
  }

  // Returns how the else block ended: a break or continue there belongs to the enclosing loop.
  Flow exec_for(const Stmt& s, Scope& scope, Text& out) {
    List items = iterate(eval(*s.expr, scope));
    if (s.filter) {  // `for x in xs if cond`: loop.index and loop.length count what passes
      List kept;
      for (const Value& item : items) {
        Scope probe{&scope, {}};
        bind_targets(probe, s.targets, item);
        if (truthy(eval(*s.filter, probe))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    // loop.cycle(a, b, ...) picks by the current index of this loop.
    auto index = std::make_shared<int64_t>(0);
    const Value cycle = Value::callable("loop.cycle", [index](CallArgs& a) -> Value {
      if (a.positional.empty()) throw RenderError("no items for cycling given");
      return a.positional[*index % a.positional.size()];
    });
    charge(items.size() / 16);
    bool completed = false;
    for (int64_t i = 0; i < n; ++i) {
      charge(kIterationSteps);
      *index = i;
      Scope iteration{&scope, {}};
      bind_targets(iteration, s.targets, items[i]);
      iteration.set("loop", loop_object(items, i, cycle));
      const Flow f = exec_body(s.body, iteration, out);
      if (f == Flow::Break) break;
      completed = completed || f == Flow::Normal;
    }
    // jinja2 runs the else block unless some iteration reached the end of the body: a loop
    // that only ever breaks or continues runs it too.
    if (completed) return Flow::Normal;
    Scope otherwise{&scope, {}};
    return exec_body(s.else_body, otherwise, out);
  }

  // The `loop` variable of iteration i. Built for every iteration, so its keys are made once.
  static Value loop_object(const List& items, int64_t i, const Value& cycle) {
    static const char* const names[] = {"index",  "index0", "revindex", "revindex0",
                                        "first",  "last",   "length",   "depth",
                                        "depth0", "previtem", "nextitem", "cycle"};
    static const std::vector<Value> keys = [] {
      std::vector<Value> k;
      for (const char* n : names) k.push_back(Value::string(n));
      return k;
    }();
    const int64_t n = static_cast<int64_t>(items.size());
    const Value values[] = {
        Value::integer(i + 1),     Value::integer(i),         Value::integer(n - i),
        Value::integer(n - i - 1), Value::boolean(i == 0),    Value::boolean(i == n - 1),
        Value::integer(n),         Value::integer(1),         Value::integer(0),
        i > 0 ? items[i - 1] : Value::undefined("there is no previous item"),
        i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"),
        cycle,
    };
    Dict d;
    d.items.reserve(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) d.items.emplace_back(keys[k], values[k]);
    return Value::dict(std::move(d));
  }

  void exec_set(const Stmt& s, Scope& scope) {
    Value v = eval(*s.expr, scope);
    if (s.attr.empty()) {
      bind_targets(scope, s.targets, v);
      return;
    }
    const Value* ns = scope.find(s.targets[0]);
    if (!ns || !ns->is(Value::Type::Namespace)) {
      throw RenderError(str_cat("cannot assign attribute on non-namespace object '",
                                s.targets[0], "'"));
    }
    ns->namespace_dict().set(Value::string(s.attr), std::move(v));
  }

  // A macro is a callable that renders its body in a scope of its own. Like jinja2 it sees the
  // variables where it was defined, not the caller's: the template's top level as it is at call
  // time, and for a macro defined inside a loop or macro, a copy of that scope's variables (a
  // copy, since the macro may outlive the iteration that defined it).
  Value make_macro(const Stmt& s, const Scope& where) {
    const Stmt* def = &s;
    auto closure = std::make_shared<Scope>();
    closure->parent = &root_;
    std::vector<const Scope*> chain;
    for (const Scope* sc = &where; sc && sc != &root_ && sc != &globals_; sc = sc->parent) {
      chain.push_back(sc);
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      for (const auto& [name, v] : (*it)->vars) closure->set(name, v);
    }
    return Value::callable(s.name, [this, def, closure](CallArgs& args) -> Value {
      if (args.positional.size() > def->params.size()) {
        throw RenderError(str_cat("macro '", def->name, "' takes not more than ",
                                  def->params.size(), " argument(s)"));
      }
      Scope local{closure.get(), {}};
      for (size_t k = 0; k < def->params.size(); ++k) {
        const MacroParam& p = def->params[k];
        const Value* given = k < args.positional.size() ? &args.positional[k] : nullptr;
        for (const auto& [name, v] : args.keyword) {
          if (name == p.name) given = &v;
        }
        if (given) {
          local.set(p.name, *given);
        } else if (p.default_value) {
          local.set(p.name, eval(*p.default_value, local));
        } else {
          local.set(p.name, Value::undefined(str_cat("parameter '", p.name, "' was not provided")));
        }
      }
      for (const auto& [name, v] : args.keyword) {
        bool known = false;
        for (const MacroParam& p : def->params) known = known || p.name == name;
        if (!known) {
          throw RenderError(str_cat("macro '", def->name, "' takes no keyword argument '", name,
                                    "'"));
        }
      }
      Text out;
      const int saved_line = line_;
      exec_body(def->body, local, out);
      line_ = saved_line;
      return Value::string(std::move(out));
    });
  }

  // ---- expressions ----

  Value eval(const Expr& e, const Scope& scope) {
    DepthGuard guard(*this);
    charge(1);
    switch (e.kind) {
      case Expr::Kind::Const: return e.value;
      case Expr::Kind::Name: {
        const Value* v = scope.find(e.name);
        return v ? *v : Value::undefined(str_cat("'", e.name, "' is undefined"));
      }
      case Expr::Kind::List: {
        List items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      case Expr::Kind::Dict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k], scope);
          d.set(std::move(key), eval(*e.args[k + 1], scope));
        }
        return Value::dict(std::move(d));
      }
      case Expr::Kind::Attr: return get_attr(eval(*e.args[0], scope), e.name);
      case Expr::Kind::Item: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope));
      case Expr::Kind::Slice: return eval_slice(e, scope);
      case Expr::Kind::Call: {
        Value callee = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, scope);
        require_defined(callee);
        if (!callee.is(Value::Type::Callable)) {
          throw RenderError(str_cat("'", type_name(callee), "' object is not callable"));
        }
        return counted(callee.call(args));
      }
      case Expr::Kind::Filter: {
        Value input = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, scope);
        return counted(find_filter(e.name)(input, args));
      }
      case Expr::Kind::Test: {
        Value input = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, scope);
        return Value::boolean(find_test(e.name)(input, args) != e.negated);
      }
      case Expr::Kind::Unary: return eval_unary(e.name, eval(*e.args[0], scope));
      case Expr::Kind::Binary: {
        if (e.name == "and" || e.name == "or") {  // Python returns an operand, not a bool
          Value a = eval(*e.args[0], scope);
          if (truthy(a) == (e.name == "or")) return a;
          return eval(*e.args[1], scope);
        }
        Value a = eval(*e.args[0], scope);
        Value b = eval(*e.args[1], scope);
        return counted(eval_binary(e.name, a, b));
      }
      case Expr::Kind::Cond:
        if (truthy(eval(*e.args[1], scope))) return eval(*e.args[0], scope);
        if (e.args[2]) return eval(*e.args[2], scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section "
                                "was defined");
    }
    return Value();
  }

  // Results that may have built a new string pay for its bytes and respect the size limit.
  Value counted(Value v) {
    if (v.is(Value::Type::String)) {
      charge(v.str().size() / 256);
      check_size(v.text());
    } else if (v.is(Value::Type::List)) {
      check_list_size(v.items().size());
      charge(v.items().size() / 16);
    }
    return v;
  }

  CallArgs eval_args(const Expr& e, const Scope& scope) {
    CallArgs args;
    for (size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k], scope));
    for (const auto& [name, x] : e.kwargs) args.keyword.emplace_back(name, eval(*x, scope));
    return args;
  }

  static Value missing(const Value& obj, const std::string& what) {
    return Value::undefined(str_cat("'", type_name(obj), " object' has no attribute ", what));
  }

  // obj.name: a method first (d.items is the method), then a key, as jinja2's getattr.
  static Value get_attr(const Value& obj, const std::string& name) {
    require_defined(obj);
    Value m = find_method(obj, name);
    if (!m.is_undefined()) return m;
    if (obj.is_mapping()) {
      if (const Value* v = obj.mapping().find(Value::string(name))) return *v;
    }
    return missing(obj, "'" + name + "'");
  }

  // obj[key]: a key or index first, then a method, as jinja2's getitem.
  static Value get_item(const Value& obj, const Value& key) {
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

  // Python slicing: [start:stop:step] with negative indices and steps, on lists and strings.
  Value eval_slice(const Expr& e, const Scope& scope) {
    const Value obj = eval(*e.args[0], scope);
    int64_t bounds[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[k + 1]) continue;
      const Value v = eval(*e.args[k + 1], scope);
      if (v.is(Value::Type::None)) continue;
      if (!v.is(Value::Type::Int) && !v.is(Value::Type::Bool)) {
        throw RenderError("slice indices must be integers or None");
      }
      bounds[k] = v.as_int();
      given[k] = true;
    }
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
    charge(picked.size() / 16);
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

  static Value eval_unary(const std::string& op, const Value& v) {
    if (op == "not") return Value::boolean(!truthy(v));
    require_defined(v);
    if (!numeric(v)) {
      throw RenderError(str_cat("bad operand type for unary ", op, ": '", type_name(v), "'"));
    }
    if (op == "+") return v.is(Value::Type::Bool) ? Value::integer(v.as_int()) : v;
    if (v.is(Value::Type::Float)) return Value::number(-v.as_double());
    return Value::integer(checked('-', 0, v.as_int()));
  }

  Value eval_binary(const std::string& op, const Value& a, const Value& b) {
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
      if (seq.is(Value::Type::String) || seq.is(Value::Type::List)) return repeat(seq, times);
    }
    bad_operands(op, a, b);
  }

  Value repeat(const Value& seq, int64_t times) {
    times = std::max<int64_t>(times, 0);
    const bool is_list = seq.is(Value::Type::List);
    const size_t unit = is_list ? seq.items().size() : seq.str().size();
    const size_t limit = is_list ? kMaxListItems : limits_.max_text_bytes;
    if (unit != 0 && static_cast<uint64_t>(times) > limit / unit) {
      throw RenderError("repeated value too large");
    }
    charge(unit * times / 256);
    if (seq.is(Value::Type::List)) {
      List items;
      for (int64_t k = 0; k < times; ++k) items.insert(items.end(), seq.items().begin(), seq.items().end());
      return Value::list(std::move(items));
    }
    Text t;
    for (int64_t k = 0; k < times; ++k) t.append(seq.text());
    return Value::string(std::move(t));
  }

  static Value arithmetic(const std::string& op, const Value& a, const Value& b) {
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

  static bool contains(const Value& container, const Value& item) {
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

  // ---- globals ----

  void add_builtin_globals() {
    globals_.vars.emplace_back("range", Value::callable("range", [](CallArgs& a) -> Value {
      int64_t v[3] = {0, 0, 1};
      const size_t n = a.positional.size();
      if (n < 1 || n > 3) throw RenderError("range expected 1 to 3 arguments");
      for (size_t k = 0; k < n; ++k) {
        if (!a.positional[k].is(Value::Type::Int)) throw RenderError("range() takes integers");
      }
      if (n == 1) {
        v[1] = a.positional[0].as_int();
      } else {
        v[0] = a.positional[0].as_int();
        v[1] = a.positional[1].as_int();
        if (n == 3) v[2] = a.positional[2].as_int();
      }
      if (v[2] == 0) throw RenderError("range() arg 3 must not be zero");
      List out;
      for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
        if (out.size() >= 100000) throw RenderError("range too big (the sandbox limit is 100000)");
        out.push_back(Value::integer(i));
      }
      return Value::list(std::move(out));
    }));
    auto from_kwargs = [](CallArgs& a, const char* what) {
      Dict d;
      for (const Value& p : a.positional) {
        if (!p.is_mapping()) throw RenderError(str_cat(what, "() takes a mapping or keywords"));
        for (const auto& [k, v] : p.mapping().items) d.set(k, v);
      }
      for (auto& [k, v] : a.keyword) d.set(Value::string(k), v);
      return d;
    };
    globals_.vars.emplace_back(
        "namespace", Value::callable("namespace", [from_kwargs](CallArgs& a) -> Value {
          return Value::namespace_(from_kwargs(a, "namespace"));
        }));
    globals_.vars.emplace_back("dict", Value::callable("dict", [from_kwargs](CallArgs& a) {
                                 return Value::dict(from_kwargs(a, "dict"));
                               }));
  }

  const Limits& limits_;
  Scope globals_;
  Scope root_;
  size_t steps_ = 0;
  int depth_ = 0;
  int line_ = 0;
};

}  // namespace

Text render(const Body& body, const Variables& variables, const Limits& limits) {
  return Renderer(variables, limits).run(body);
}

}  // namespace flashserve::jinja
