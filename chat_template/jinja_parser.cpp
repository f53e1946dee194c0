// Recursive-descent parser for the Jinja subset. The expression functions follow jinja2's
// precedence from loosest to tightest:
//   conditional (x if c else y) < or < and < not < comparisons and `in` < + - < ~ < * / // %
//   < ** < unary - + < postfix (.attr [i] [a:b] call) < filters and tests (| f, is t)
#include "chat_template/jinja_parser.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "chat_template/jinja_builtins.h"
#include "core/error.h"

namespace flashserve::jinja {
namespace {

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& origin)
      : toks_(tokens), origin_(origin) {}

  Body parse_template() {
    std::string found;  // stays empty: the top level ends at the end of the template
    return parse_body({}, &found);
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().kind == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == Tok::Name && cur().text == name; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(cur().line, what); }
  [[noreturn]] void fail_at(int line, const std::string& what) const {
    throw Error(str_cat(origin_, ": line ", line, ": ", what));
  }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::Eof: return "end of template";
      case Tok::BlockEnd: return "'%}'";
      case Tok::VarEnd: return "'}}'";
      case Tok::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(str_cat("expected '", op, "', got ", describe(cur())));
  }
  void expect(Tok kind, const char* what) {
    if (cur().kind != kind) fail(str_cat("expected ", what, ", got ", describe(cur())));
    advance();
  }
  void expect_block_end() { expect(Tok::BlockEnd, "'%}'"); }
  std::string expect_name() {
    if (cur().kind != Tok::Name) fail(str_cat("expected a name, got ", describe(cur())));
    std::string n = cur().text;
    advance();
    return n;
  }

  static Stmt make_stmt(Stmt::Kind kind, int line) {
    Stmt s;
    s.kind = kind;
    s.line = line;
    return s;
  }
  static ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  static ExprPtr make_op(Expr::Kind kind, std::string op, ExprPtr a, ExprPtr b = nullptr) {
    auto e = make(kind, a->line);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    if (b) e->args.push_back(std::move(b));
    return e;
  }

  // ---- statements ----

  // Statements up to a block tag named in `ends` (its name consumed, stored in *found).
  Body parse_body(const std::vector<std::string>& ends, std::string* found) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == Tok::Eof) {
        if (ends.empty()) return body;
        std::string want;
        for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
        fail(str_cat("unexpected end of template, expected ", want));
      }
      if (t.kind == Tok::Text) {
        Stmt s = make_stmt(Stmt::Kind::Text, t.line);
        s.text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.kind == Tok::VarBegin) {
        advance();
        Stmt s = make_stmt(Stmt::Kind::Output, t.line);
        s.expr = parse_tuple(true);
        expect(Tok::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (t.kind == Tok::BlockBegin) {
        const Token& name = peek();
        if (name.kind == Tok::Name &&
            std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          advance();
          advance();
          *found = name.text;
          return body;
        }
        advance();
        body.push_back(parse_statement());
      } else {
        fail(str_cat("unexpected ", describe(t)));
      }
    }
  }

  Stmt parse_statement() {
    if (cur().kind != Tok::Name) fail(str_cat("expected a tag name, got ", describe(cur())));
    const std::string tag = cur().text;
    const int line = cur().line;
    advance();
    if (++depth_ > kMaxDepth) fail_at(line, "tags nested too deeply");
    Stmt s = parse_tag(tag, line);
    --depth_;
    return s;
  }

  Stmt parse_tag(const std::string& tag, int line) {
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(line, str_cat("'", tag, "' outside a loop"));
      expect_block_end();
      return make_stmt(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, line);
    }
    if (tag == "generation") {  // transformers' AssistantTracker tag: renders its body as is
      expect_block_end();
      Stmt s = make_stmt(Stmt::Kind::Block, line);
      std::string found;
      s.body = parse_body({"endgeneration"}, &found);
      expect_block_end();
      return s;
    }
    fail_at(line, str_cat("unsupported tag '", tag, "'"));
  }

  Stmt parse_if(int line) {
    Stmt s = make_stmt(Stmt::Kind::If, line);
    std::string found = "if";
    while (found == "if" || found == "elif") {
      Branch b;
      b.condition = parse_tuple(false);
      expect_block_end();
      b.body = parse_body({"elif", "else", "endif"}, &found);
      s.branches.push_back(std::move(b));
    }
    if (found == "else") {
      expect_block_end();
      s.else_body = parse_body({"endif"}, &found);
    }
    expect_block_end();
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    do {
      names.push_back(expect_name());
    } while (accept_op(","));
    if (paren) expect_op(")");
    return names;
  }

  Stmt parse_for(int line) {
    Stmt s = make_stmt(Stmt::Kind::For, line);
    s.targets = parse_targets();
    if (!accept_name("in")) fail(str_cat("expected 'in', got ", describe(cur())));
    s.expr = parse_tuple(false);
    if (accept_name("if")) s.filter = parse_expression(true);
    if (is_name("recursive")) fail("unsupported: recursive loops");
    expect_block_end();
    ++loop_depth_;
    std::string found;
    s.body = parse_body({"endfor", "else"}, &found);
    --loop_depth_;
    if (found == "else") {
      expect_block_end();
      s.else_body = parse_body({"endfor"}, &found);
    }
    expect_block_end();
    return s;
  }

  Stmt parse_set(int line) {
    Stmt s = make_stmt(Stmt::Kind::Set, line);
    s.targets = parse_targets();
    if (s.targets.size() == 1 && accept_op(".")) s.attr = expect_name();
    if (accept_op("=")) {
      s.expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (s.targets.size() != 1 || !s.attr.empty()) fail("a block {% set %} takes one plain name");
    if (is_op("|")) fail("unsupported: filters on a block {% set %}");
    expect_block_end();
    s.kind = Stmt::Kind::SetBlock;
    std::string found;
    s.body = parse_body({"endset"}, &found);
    expect_block_end();
    return s;
  }

  Stmt parse_macro(int line) {
    Stmt s = make_stmt(Stmt::Kind::Macro, line);
    s.name = expect_name();
    expect_op("(");
    while (!accept_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (accept_op(")")) break;  // trailing comma
      MacroParam p{expect_name(), nullptr};
      if (accept_op("=")) p.default_value = parse_expression(true);
      s.params.push_back(std::move(p));
    }
    expect_block_end();
    const int saved = loop_depth_;
    loop_depth_ = 0;  // a loop around the definition is not around the body
    std::string found;
    s.body = parse_body({"endmacro"}, &found);
    loop_depth_ = saved;
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  // An expression, or a tuple when commas follow (`{% set a = 1, 2 %}`).
  ExprPtr parse_tuple(bool with_condexpr) {
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

  ExprPtr parse_expression(bool with_condexpr) {
    if (++depth_ > kMaxDepth) fail("expression nested too deeply");
    ExprPtr e = with_condexpr ? parse_condexpr() : parse_or();
    --depth_;
    return e;
  }

  ExprPtr parse_condexpr() {
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
  ExprPtr parse_binary(std::initializer_list<const char*> ops, Next next) {
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

  ExprPtr parse_or() { return parse_binary({"or"}, [this] { return parse_and(); }); }
  ExprPtr parse_and() { return parse_binary({"and"}, [this] { return parse_not(); }); }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const int line = cur().line;
      advance();
      if (++depth_ > kMaxDepth) fail("expression nested too deeply");
      auto e = make(Expr::Kind::Unary, line);
      e->name = "not";
      e->args.push_back(parse_not());
      --depth_;
      return e;
    }
    return parse_compare();
  }

  // Python chains a < b < c as (a < b) and (b < c); templates do not use it, so it is refused
  // rather than silently read as (a < b) < c.
  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() { return parse_binary({"+", "-"}, [this] { return parse_concat(); }); }
  ExprPtr parse_concat() { return parse_binary({"~"}, [this] { return parse_math2(); }); }
  ExprPtr parse_math2() { return parse_binary({"*", "/", "//", "%"}, [this] { return parse_pow(); }); }
  ExprPtr parse_pow() { return parse_binary({"**"}, [this] { return parse_unary(true); }); }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const int line = cur().line;
      std::string op = cur().text;
      advance();
      if (++depth_ > kMaxDepth) fail("expression nested too deeply");
      e = make(Expr::Kind::Unary, line);
      e->name = op;
      e->args.push_back(parse_unary(false));
      --depth_;
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
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

  ExprPtr parse_parenthesized() {
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
  ExprPtr parse_items(Expr::Kind kind, const char* close, Item item) {
    auto e = make(kind, cur().line);
    advance();
    for (bool first = true; !accept_op(close); first = false) {
      if (!first) expect_op(",");
      if (accept_op(close)) break;
      item(*e);
    }
    return e;
  }

  ExprPtr parse_list() {
    return parse_items(Expr::Kind::List, "]", [this](Expr& e) { e.args.push_back(parse_expression(true)); });
  }

  ExprPtr parse_dict() {
    return parse_items(Expr::Kind::Dict, "}", [this](Expr& e) {
      e.args.push_back(parse_expression(true));  // key
      expect_op(":");
      e.args.push_back(parse_expression(true));  // value
    });
  }

  ExprPtr parse_postfix(ExprPtr e) {
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

  ExprPtr parse_filter_expr(ExprPtr e) {
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

  ExprPtr parse_subscript(ExprPtr obj) {
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
  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make_op(Expr::Kind::Call, "", std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr input) {
    expect_op("|");
    const int line = cur().line;
    std::string name = expect_name();
    if (!find_filter(name)) fail_at(line, str_cat("unsupported filter '", name, "'"));
    auto e = make_op(Expr::Kind::Filter, name, std::move(input));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr input) {
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

  static constexpr int kMaxDepth = 200;  // nesting of expressions: the parser's stack stays small

  const std::vector<Token>& toks_;
  const std::string& origin_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse_template();
}

}  // namespace flashserve::jinja
