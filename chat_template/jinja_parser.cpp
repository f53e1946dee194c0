// Parses the statements of a template: text, {{ output }} and the tags if/elif/else, for (with
// else, break, continue), set (plain, tuple, namespace attribute, block), macro and generation.
// Expressions inside them go to ExprParser.
#include "chat_template/jinja_parser.h"

#include <algorithm>

#include "chat_template/jinja_expr_parser.h"

namespace flashserve::jinja {
namespace {

class Parser : public ExprParser {
 public:
  using ExprParser::ExprParser;

  Body parse_template() {
    std::string found;  // stays empty: the top level ends at the end of the template
    return parse_body({}, &found);
  }

 private:
  static Stmt make_stmt(Stmt::Kind kind, int line) {
    Stmt s;
    s.kind = kind;
    s.line = line;
    return s;
  }

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
    if (!enter()) fail_at(line, "tags nested too deeply");
    Stmt s = parse_tag(tag, line);
    leave();
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

  int loop_depth_ = 0;  // enclosing for-loops within the current macro or template
};

}  // namespace

Body parse(const std::vector<Token>& tokens, const std::string& origin) {
  return Parser(tokens, origin).parse_template();
}

}  // namespace flashserve::jinja
