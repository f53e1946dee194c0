// Parses Jinja tokens into a statement tree, following jinja2's grammar and operator precedence
// (jinja2/parser.py). Tags outside the supported subset, unknown filters and unknown tests are
// load-time errors: flashserve::Error "<origin>: line N: unsupported tag 'include'".
#pragma once

#include <string>
#include <vector>

#include "chat_template/jinja_ast.h"
#include "chat_template/jinja_lexer.h"

namespace flashserve::jinja {

Body parse(const std::vector<Token>& tokens, const std::string& origin);

}  // namespace flashserve::jinja
