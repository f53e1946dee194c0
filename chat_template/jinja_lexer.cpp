// The Jinja lexer: template text and the tokens inside {{ }} and {% %}, with jinja2's whitespace
// rules applied to the text as it is cut (see jinja_lexer.h for the rules).
#include "chat_template/jinja_lexer.h"

#include <cctype>

#include "chat_template/jinja_value.h"
#include "core/error.h"

namespace flashserve::jinja {
namespace {

// jinja2 normalises every line ending to "\n" and drops one trailing newline
// (keep_trailing_newline=False).
std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's str.rstrip(): drops trailing whitespace code points.
std::string rstrip_space(const std::string& s) {
  const auto starts = code_point_starts(s);
  size_t end = s.size();
  for (size_t k = starts.size(); k-- > 0;) {
    size_t i = starts[k];
    if (!is_python_space(decode_code_point(s, i))) break;
    end = starts[k];
  }
  return s.substr(0, end);
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& origin)
      : src_(normalize_newlines(source)), origin_(origin) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag_start(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text));
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                            ? src_[tag + 2]
                            : 0;
      if (sign == '-') {
        text = rstrip_space(text);
      } else if (sign != '+' && kind != '{') {
        lstrip_block(text);
      }
      emit_text(std::move(text));
      count_lines(pos_, tag);
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        skip_comment();
      } else {
        lex_tag(kind == '%');
      }
    }
    out_.push_back({Tok::Eof, "", line_});
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(str_cat(origin_, ": line ", line_, ": ", what));
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  // lstrip_blocks: spaces and tabs between the start of a line and a block tag are dropped. The
  // text may start the line itself when the previous tag ended with a newline.
  void lstrip_block(std::string& text) const {
    const size_t nl = text.rfind('\n');
    const size_t line_begin = nl == std::string::npos ? 0 : nl + 1;
    if (line_begin == 0 && !line_starting_) return;
    if (text.find_first_not_of(" \t", line_begin) == std::string::npos) text.resize(line_begin);
  }

  void emit_text(std::string text) {
    if (!text.empty()) out_.push_back({Tok::Text, std::move(text), line_});
  }

  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) line_ += src_[i] == '\n';
  }

  // Consumes `n` bytes of a closing tag, then what its control asks for: "-" all whitespace,
  // none (trim_blocks, block and comment tags only) one newline.
  void close_tag(size_t n, char control, bool trim_newline) {
    const size_t start = pos_;
    pos_ += n;
    if (control == '-') {
      while (pos_ < src_.size()) {
        size_t i = pos_;
        if (!is_python_space(decode_code_point(src_, i))) break;
        pos_ = i;
      }
    } else if (control == 0 && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    count_lines(start, pos_);
    line_starting_ = pos_ > start && src_[pos_ - 1] == '\n';
  }

  void skip_comment() {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("missing end of comment tag");
    char control = 0;
    size_t close = end;
    if (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) {
      control = src_[end - 1];
      close = end - 1;
    }
    count_lines(pos_, close);
    pos_ = close;
    close_tag(end + 2 - close, control, true);
  }

  bool at(const char* s) const { return src_.compare(pos_, std::char_traits<char>::length(s), s) == 0; }

  // Tokens up to the closing %} or }}; a closing mark inside brackets belongs to the expression.
  void lex_tag(bool block) {
    out_.push_back({block ? Tok::BlockBegin : Tok::VarBegin, "", line_});
    int depth = 0;
    while (true) {
      if (pos_ >= src_.size()) fail(block ? "missing end of block tag '%}'" : "missing end of '}}'");
      if (depth == 0) {
        const char* close = block ? "%}" : "}}";
        const Tok end_kind = block ? Tok::BlockEnd : Tok::VarEnd;
        if (src_[pos_] == '-' && src_.compare(pos_ + 1, 2, close) == 0) {
          out_.push_back({end_kind, "", line_});
          close_tag(3, '-', block);
          return;
        }
        if (block && src_[pos_] == '+' && src_.compare(pos_ + 1, 2, close) == 0) {
          out_.push_back({end_kind, "", line_});
          close_tag(3, '+', block);
          return;
        }
        if (src_.compare(pos_, 2, close) == 0) {
          out_.push_back({end_kind, "", line_});
          close_tag(2, 0, block);
          return;
        }
      }
      const unsigned char c = src_[pos_];
      if (std::isspace(c)) {
        line_ += c == '\n';
        ++pos_;
      } else if (std::isdigit(c)) {
        lex_number();
      } else if (std::isalpha(c) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) ||
                                      src_[pos_] == '_')) {
          ++pos_;
        }
        out_.push_back({Tok::Name, src_.substr(start, pos_ - start), line_});
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(depth);
      }
    }
  }

  void lex_number() {
    const size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                    (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                     std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))))) {
        ++pos_;
      }
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      ++pos_;
      digits();
      is_float = true;
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        pos_ = p;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    out_.push_back({is_float ? Tok::Float : Tok::Int, text, line_});
  }

  // A quoted string with Python's backslash escapes (jinja2 decodes them with "unicode-escape").
  void lex_string(char quote) {
    const int start_line = line_;
    std::string value;
    ++pos_;
    while (true) {
      if (pos_ >= src_.size()) fail("unterminated string");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        value += c;
        continue;
      }
      if (pos_ >= src_.size()) fail("unterminated string");
      const char e = src_[pos_++];
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': ++line_; break;  // line continuation
        case 'x': append_code_point(value, hex_escape(2)); break;
        case 'u': append_code_point(value, hex_escape(4)); break;
        case 'U': append_code_point(value, hex_escape(8)); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = e - '0';
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7';
                 ++k) {
              cp = cp * 8 + (src_[pos_++] - '0');
            }
            append_code_point(value, cp);
          } else {
            value += '\\';  // Python keeps unknown escapes as written
            value += e;
          }
      }
    }
    out_.push_back({Tok::String, std::move(value), start_line});
  }

  uint32_t hex_escape(int n) {
    uint32_t cp = 0;
    for (int k = 0; k < n; ++k) {
      if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_]))) {
        fail("truncated \\x, \\u or \\U escape in a string");
      }
      const char h = src_[pos_++];
      cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid code point in a string escape");
    return cp;
  }

  void lex_operator(int& depth) {
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two) {
      if (at(op)) {
        out_.push_back({Tok::Op, op, line_});
        pos_ += 2;
        return;
      }
    }
    const char c = src_[pos_];
    if (std::string("+-*/%~()[]{}=<>.,:|").find(c) == std::string::npos) {
      fail(str_cat("unexpected character '", c, "'"));
    }
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') {
      if (depth == 0) fail(str_cat("unexpected '", c, "'"));
      --depth;
    }
    out_.push_back({Tok::Op, std::string(1, c), line_});
    ++pos_;
  }

  std::string src_;
  const std::string& origin_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& source, const std::string& origin) {
  return Lexer(source, origin).run();
}

}  // namespace flashserve::jinja
