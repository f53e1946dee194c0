// The parser's view of the token list: the current token, look-ahead, accept/expect helpers
// and load-time errors "<origin>: line N: ...". It also counts the nesting of tags and
// expressions, bounded so that the parser's recursion stays shallow.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "chat_template/jinja_lexer.h"
#include "core/error.h"

namespace flashserve::jinja {

class TokenStream {
 public:
  TokenStream(const std::vector<Token>& tokens, const std::string& origin)
      : toks_(tokens), origin_(origin) {}

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

  // One more level of nesting (a tag or an expression); false when it is one too many.
  bool enter() { return ++depth_ <= kMaxDepth; }
  void leave() { --depth_; }

 private:
  static constexpr int kMaxDepth = 200;

  const std::vector<Token>& toks_;
  const std::string& origin_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace flashserve::jinja
