// The tree-walking renderer: statements write Text (with literal ranges) to an output,
// expressions evaluate to Value (operators in jinja_operators.cpp). The template's variables sit
// in nested scopes over the caller's variables and the builtin globals.
#include "chat_template/jinja_eval.h"

#include "chat_template/jinja_builtins.h"
#include "chat_template/jinja_budget.h"
#include "chat_template/jinja_operators.h"
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

class Renderer {
 public:
  Renderer(const Variables& variables, const Limits& limits) : budget_(limits) {
    globals_.vars = variables;
    for (auto& g : builtin_globals()) globals_.vars.push_back(std::move(g));
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

  struct DepthGuard {
    Renderer& r;
    explicit DepthGuard(Renderer& renderer) : r(renderer) {
      if (r.depth_ >= r.budget_.limits().max_depth) throw RenderError("template nested too deeply");
      ++r.depth_;
    }
    ~DepthGuard() { --r.depth_; }
  };

  void write(Text& out, const Text& t) {
    out.append(t);
    budget_.charge(t.s.size() / 256);
    budget_.check_size(out);
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
    budget_.charge(1);
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
    budget_.charge(items.size() / 16);
    bool completed = false;
    for (int64_t i = 0; i < n; ++i) {
      budget_.charge(kIterationSteps);
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
    budget_.charge(1);
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
      case Expr::Kind::Unary: return unary_op(e.name, eval(*e.args[0], scope));
      case Expr::Kind::Binary: {
        if (e.name == "and" || e.name == "or") {  // Python returns an operand, not a bool
          Value a = eval(*e.args[0], scope);
          if (truthy(a) == (e.name == "or")) return a;
          return eval(*e.args[1], scope);
        }
        Value a = eval(*e.args[0], scope);
        Value b = eval(*e.args[1], scope);
        return counted(binary_op(e.name, a, b, budget_));
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
      budget_.charge(v.str().size() / 256);
      budget_.check_size(v.text());
    } else if (v.is(Value::Type::List)) {
      check_list_size(v.items().size());
      budget_.charge(v.items().size() / 16);
    }
    return v;
  }

  CallArgs eval_args(const Expr& e, const Scope& scope) {
    CallArgs args;
    for (size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k], scope));
    for (const auto& [name, x] : e.kwargs) args.keyword.emplace_back(name, eval(*x, scope));
    return args;
  }

  // obj[start:stop:step]: evaluates the parts (None or missing: not given), then slices.
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
    return slice_value(obj, bounds, given, budget_);
  }

  Budget budget_;
  Scope globals_;
  Scope root_;
  int depth_ = 0;
  int line_ = 0;
};

}  // namespace

Text render(const Body& body, const Variables& variables, const Limits& limits) {
  return Renderer(variables, limits).run(body);
}

}  // namespace flashserve::jinja