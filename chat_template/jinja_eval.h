// Renders a parsed template: walks the statement tree with jinja2's scoping (a for-loop body and
// a macro body are scopes of their own, if-blocks are not) and evaluates expressions over Value.
// Hostile templates are bounded: nesting depth, work steps and output size.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "chat_template/jinja_ast.h"
#include "chat_template/jinja_value.h"

namespace flashserve::jinja {

struct Limits {
  int max_depth = 300;               // nested evaluation (macro recursion included)
  size_t max_steps = 4'000'000;  // expression evaluations; a loop iteration counts 8, 256 bytes of string 1
  size_t max_text_bytes = 32u << 20;  // the output, and any one string built on the way
};

// The variables the template starts with (messages, bos_token, ...) and callables
// (raise_exception, ...), in that order of lookup after the template's own variables.
using Variables = std::vector<std::pair<std::string, Value>>;

// Throws RenderError with "line N: " prefixed for evaluation errors; lets other exceptions (a
// ChatTemplateError from raise_exception) pass unchanged.
Text render(const Body& body, const Variables& variables, const Limits& limits = Limits());

}  // namespace flashserve::jinja
