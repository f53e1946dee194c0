// The syntax tree of a parsed template: expressions (Expr) and statements (Stmt). Plain structs
// whose fields are used according to `kind`; jinja_parser builds them, jinja_eval walks them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat_template/jinja_value.h"

namespace flashserve::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using Kwargs = std::vector<std::pair<std::string, ExprPtr>>;

struct Expr {
  enum class Kind {
    Const,    // value
    Name,     // name
    List,     // args: items; name "tuple" for (a, b) and a, b
    Dict,     // args: key0, value0, key1, value1, ...
    Attr,     // args[0].name
    Item,     // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]], missing parts null
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // name ("-", "+", "not") args[0]
    Binary,   // args[0] name args[1]; name: + - * / // % ** ~ == != < <= > >= in notin and or
    Cond,     // args[0] if args[1] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  Kwargs kwargs;
  bool negated = false;  // Test
};

struct Stmt;
using Body = std::vector<Stmt>;

struct Branch {
  ExprPtr condition;
  Body body;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches (if, elif...), else_body
    For,       // for targets in expr [if filter]: body, else else_body
    Set,       // set targets = expr; or set targets[0].attr = expr (attr non-empty)
    SetBlock,  // set targets[0] %}body{% endset
    Macro,     // macro name(params): body
    Break,
    Continue,
    Block,  // a body rendered in place ({% generation %})
  };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<Branch> branches;
  std::vector<MacroParam> params;
  Body body;
  Body else_body;
};

}  // namespace flashserve::jinja
