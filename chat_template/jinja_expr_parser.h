// Parses Jinja expressions into Expr trees with jinja2's grammar (jinja2/parser.py). Precedence
// from loosest to tightest:
//   conditional (x if c else y) < or < and < not < comparisons and `in` < + - < ~ < * / // %
//   < ** < unary - + < postfix (.attr [i] [a:b] call) < filters and tests (| f, is t)
// Unknown filters and tests are load-time errors.
#pragma once

#include <initializer_list>

#include "chat_template/jinja_ast.h"
#include "chat_template/jinja_token_stream.h"

namespace flashserve::jinja {

// The statement parser (jinja_parser.cpp) extends this with tags over the same token stream.
class ExprParser : public TokenStream {
 public:
  using TokenStream::TokenStream;

  // An expression, or a tuple when commas follow (`{% set a = 1, 2 %}`).
  ExprPtr parse_tuple(bool with_condexpr);
  // One expression; with_condexpr allows `x if c else y` at its top.
  ExprPtr parse_expression(bool with_condexpr);

 private:
  ExprPtr parse_condexpr();
  template <class Next>
  ExprPtr parse_binary(std::initializer_list<const char*> ops, Next next);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_parenthesized();
  template <class Item>
  ExprPtr parse_items(Expr::Kind kind, const char* close, Item item);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter(ExprPtr input);
  ExprPtr parse_test(ExprPtr input);
};

}  // namespace flashserve::jinja
