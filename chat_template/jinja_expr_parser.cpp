// Recursive-descent parsing of Jinja expressions, one function per precedence level of
// jinja_expr_parser.h, each calling the next tighter one for its operands.
#include "chat_template/jinja_expr_parser.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "chat_template/jinja_builtins.h"

namespace flashserve::jinja {
namespace {

ExprPtr make(Expr::Kind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}
ExprPtr make_op(Expr::Kind kind, std::string op, ExprPtr a, ExprPtr b = nullptr) {
  auto e = make(kind, a->line);
  e->name = std::move(op);
  e->args.push_back(std::move(a));
  if (b) e->args.push_back(std::move(b));
  return e;
}

}  // namespace

// An expression, or a tuple when commas follow (`{% set a = 1, 2 %}`).
ExprPtr ExprParser::parse_tuple(bool with_condexpr) {
  const int line = cur().line;
  ExprPtr first = parse_expression(with_condexpr);
  if (!is_op(",")) return first;
  auto list = make(Expr::Kind::List, line);
  list->name = "tuple";
  list->args.push_back(std::move(first));
  while (accept_op(",")) {
    if (cur().kind == Tok::BlockEnd || cur().kind == Tok::VarEnd || is_op(")")) break;
    list->args.push_back(parse_expression(with_condexpr));
  }
  return list;
}

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  if (!enter()) fail("expression nested too deeply");
  ExprPtr e = with_condexpr ? parse_condexpr() : parse_or();
  leave();
  return e;
}

ExprPtr ExprParser::parse_condexpr() {
  ExprPtr e = parse_or();
  while (accept_name("if")) {
    auto c = make(Expr::Kind::Cond, e->line);
    c->args.push_back(std::move(e));
    c->args.push_back(parse_or());
    c->args.push_back(accept_name("else") ? parse_condexpr() : nullptr);
    e = std::move(c);
  }
  return e;
}

// One left-associative level: operands from `next`, joined by any of `ops` (keywords such as
// "or" or operator tokens such as "+").
template <class Next>
ExprPtr ExprParser::parse_binary(std::initializer_list<const char*> ops, Next next) {
  ExprPtr e = next();
  for (;;) {
    const char* op = nullptr;
    for (const char* o : ops)
      if (std::isalpha(static_cast<unsigned char>(o[0])) ? is_name(o) : is_op(o)) op = o;
    if (op == nullptr) return e;
    advance();
    e = make_op(Expr::Kind::Binary, op, std::move(e), next());
  }
}

ExprPtr ExprParser::parse_or() { return parse_binary({"or"}, [this] { return parse_and(); }); }
ExprPtr ExprParser::parse_and() { return parse_binary({"and"}, [this] { return parse_not(); }); }

ExprPtr ExprParser::parse_not() {
  if (is_name("not")) {
    const int line = cur().line;
    advance();
    if (!enter()) fail("expression nested too deeply");
    auto e = make(Expr::Kind::Unary, line);
    e->name = "not";
    e->args.push_back(parse_not());
    leave();
    return e;
  }
  return parse_compare();
}

// Python chains a < b < c as (a < b) and (b < c); templates do not use it, so it is refused
// rather than silently read as (a < b) < c.
ExprPtr ExprParser::parse_compare() {
  ExprPtr e = parse_math1();
  static const char* const ops[] = {"==", "!=", "<", "<=", ">", ">="};
  for (int n = 0;; ++n) {
    std::string op;
    for (const char* o : ops) {
      if (is_op(o)) op = o;
    }
    if (!op.empty()) {
      advance();
    } else if (is_name("in")) {
      advance();
      op = "in";
    } else if (is_name("not") && peek().kind == Tok::Name && peek().text == "in") {
      advance();
      advance();
      op = "notin";
    } else {
      return e;
    }
    if (n > 0) fail("chained comparisons (a < b < c) are not supported");
    e = make_op(Expr::Kind::Binary, op, std::move(e), parse_math1());
  }
}

ExprPtr ExprParser::parse_math1() {
  return parse_binary({"+", "-"}, [this] { return parse_concat(); });
}
ExprPtr ExprParser::parse_concat() { return parse_binary({"~"}, [this] { return parse_math2(); }); }
ExprPtr ExprParser::parse_math2() {
  return parse_binary({"*", "/", "//", "%"}, [this] { return parse_pow(); });
}
ExprPtr ExprParser::parse_pow() { return parse_binary({"**"}, [this] { return parse_unary(true); }); }

ExprPtr ExprParser::parse_unary(bool with_filter) {
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const int line = cur().line;
    std::string op = cur().text;
    advance();
    if (!enter()) fail("expression nested too deeply");
    e = make(Expr::Kind::Unary, line);
    e->name = op;
    e->args.push_back(parse_unary(false));
    leave();
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr ExprParser::parse_primary() {
  const Token& t = cur();
  const int line = t.line;
  switch (t.kind) {
    case Tok::Name: {
      auto e = make(Expr::Kind::Const, line);
      if (t.text == "true" || t.text == "True") {
        e->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::Name;
        e->name = t.text;
      }
      advance();
      return e;
    }
    case Tok::String: {
      std::string s;
      while (cur().kind == Tok::String) {  // adjacent literals join, as in Python
        s += cur().text;
        advance();
      }
      auto e = make(Expr::Kind::Const, line);
      e->value = Value::string(std::move(s));
      return e;
    }
    case Tok::Int: {
      auto e = make(Expr::Kind::Const, line);
      errno = 0;
      const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer literal out of range");
      e->value = Value::integer(v);
      advance();
      return e;
    }
    case Tok::Float: {
      auto e = make(Expr::Kind::Const, line);
      e->value = Value::number(std::strtod(t.text.c_str(), nullptr));
      advance();
      return e;
    }
    case Tok::Op:
      if (t.text == "(") return parse_parenthesized();
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default: break;
  }
  fail(str_cat("unexpected ", describe(t)));
}

ExprPtr ExprParser::parse_parenthesized() {
  const int line = cur().line;
  advance();
  auto list = make(Expr::Kind::List, line);
  list->name = "tuple";
  if (accept_op(")")) return list;  // ()
  ExprPtr first = parse_expression(true);
  if (accept_op(")")) return first;
  list->args.push_back(std::move(first));
  while (accept_op(",")) {
    if (is_op(")")) break;
    list->args.push_back(parse_expression(true));
  }
  expect_op(")");
  return list;
}

// A [...] or {...} literal after its opening token: comma-separated items up to `close` (a
// trailing comma allowed), each read by `item` into e's args.
template <class Item>
ExprPtr ExprParser::parse_items(Expr::Kind kind, const char* close, Item item) {
  auto e = make(kind, cur().line);
  advance();
  for (bool first = true; !accept_op(close); first = false) {
    if (!first) expect_op(",");
    if (accept_op(close)) break;
    item(*e);
  }
  return e;
}

ExprPtr ExprParser::parse_list() {
  return parse_items(Expr::Kind::List, "]", [this](Expr& e) { e.args.push_back(parse_expression(true)); });
}

ExprPtr ExprParser::parse_dict() {
  return parse_items(Expr::Kind::Dict, "}", [this](Expr& e) {
    e.args.push_back(parse_expression(true));  // key
    expect_op(":");
    e.args.push_back(parse_expression(true));  // value
  });
}

ExprPtr ExprParser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      e = parse_filter(std::move(e));
    } else if (is_name("is")) {
      e = parse_test(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExprParser::parse_subscript(ExprPtr obj) {
  const int line = cur().line;
  if (accept_op(".")) {
    if (cur().kind == Tok::Int) {  // foo.0 is foo[0]
      auto index = make(Expr::Kind::Const, line);
      index->value = Value::integer(std::strtoll(cur().text.c_str(), nullptr, 10));
      advance();
      return make_op(Expr::Kind::Item, "", std::move(obj), std::move(index));
    }
    auto e = make_op(Expr::Kind::Attr, expect_name(), std::move(obj));
    return e;
  }
  expect_op("[");
  ExprPtr parts[3];
  int colons = 0;
  if (!is_op(":")) parts[0] = parse_expression(true);
  if (is_op(":")) {
    for (int k = 1; k <= 2 && accept_op(":"); ++k) {
      colons = k;
      if (!is_op(":") && !is_op("]")) parts[k] = parse_expression(true);
    }
  }
  expect_op("]");
  if (colons == 0) {
    if (!parts[0]) fail("empty subscript");
    return make_op(Expr::Kind::Item, "", std::move(obj), std::move(parts[0]));
  }
  auto e = make(Expr::Kind::Slice, line);
  e->args.push_back(std::move(obj));
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

// (positional..., name=value...) into e->args (after what is already there) and e->kwargs.
void ExprParser::parse_call_args(Expr& e) {
  expect_op("(");
  bool first = true;
  while (!accept_op(")")) {
    if (!first) expect_op(",");
    first = false;
    if (accept_op(")")) break;
    if (is_op("*") || is_op("**")) fail("unsupported: *args and **kwargs in calls");
    if (cur().kind == Tok::Name && peek().kind == Tok::Op && peek().text == "=") {
      std::string key = cur().text;
      advance();
      advance();
      e.kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e.kwargs.empty()) fail("positional argument after a keyword argument");
      e.args.push_back(parse_expression(true));
    }
  }
}

ExprPtr ExprParser::parse_call(ExprPtr callee) {
  auto e = make_op(Expr::Kind::Call, "", std::move(callee));
  parse_call_args(*e);
  return e;
}

ExprPtr ExprParser::parse_filter(ExprPtr input) {
  expect_op("|");
  const int line = cur().line;
  std::string name = expect_name();
  if (!find_filter(name)) fail_at(line, str_cat("unsupported filter '", name, "'"));
  auto e = make_op(Expr::Kind::Filter, name, std::move(input));
  if (is_op("(")) parse_call_args(*e);
  return e;
}

ExprPtr ExprParser::parse_test(ExprPtr input) {
  advance();  // is
  const bool negated = accept_name("not");
  const int line = cur().line;
  std::string name = expect_name();
  if (!find_test(name)) fail_at(line, str_cat("unsupported test '", name, "'"));
  auto e = make_op(Expr::Kind::Test, name, std::move(input));
  e->negated = negated;
  const Token& t = cur();
  const bool arg_starts = t.kind == Tok::Name || t.kind == Tok::String || t.kind == Tok::Int ||
                          t.kind == Tok::Float ||
                          (t.kind == Tok::Op && (t.text == "[" || t.text == "{"));
  if (is_op("(")) {
    parse_call_args(*e);
  } else if (arg_starts && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("tests cannot be chained with 'is'");
    e->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
  }
  return e;
}

}  // namespace flashserve::jinja
