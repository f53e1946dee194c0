// Splits a Jinja template into tokens the way jinja2's lexer does with the settings transformers
// uses: trim_blocks (the first newline after a block or comment tag is dropped), lstrip_blocks
// (spaces and tabs before a block or comment tag at the start of a line are dropped), the manual
// controls `{%-`, `-%}`, `{{-`, `-}}`, `{#-`, `-#}` (strip all whitespace on that side) and `{%+`
// (keep it), "\r\n" and "\r" read as "\n", and one trailing newline of the source dropped.
#pragma once

#include <string>
#include <vector>

namespace flashserve::jinja {

enum class Tok {
  Text,        // template text, whitespace control already applied
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // text holds the unescaped value
  Int,
  Float,
  Op,  // punctuation and operators: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } . , : |
  Eof,
};

struct Token {
  Tok kind;
  std::string text;
  int line;
};

// Throws flashserve::Error "<origin>: line N: ..." for an unterminated tag, string or comment
// and for characters that start no token.
std::vector<Token> lex(const std::string& source, const std::string& origin);

}  // namespace flashserve::jinja
