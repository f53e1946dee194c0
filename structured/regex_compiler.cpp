// Recursive-descent regex parser building a RegexAst, and the AST's grammar. Each piece reports
// whether it can match the empty string, so an unbounded repeat of such a piece is refused rather
// than turned into a grammar the parser could loop in.
#include "structured/regex_compiler.h"

#include <algorithm>

#include "structured/schema_error.h"
#include "tokenizer/hf_text.h"

namespace flashserve::structured {

namespace {

struct Piece {
  int32_t node = -1;
  bool nullable = true;
};

class RegexParser {
 public:
  RegexParser(std::u32string text, const RegexOptions& o) : s_(std::move(text)), o_(o) {}

  RegexAst parse() {
    bool anchored_start = false, anchored_end = false;
    if (!s_.empty() && s_[0] == '^') {
      anchored_start = true;
      pos_ = 1;
    }
    if (s_.size() > pos_ && s_.back() == '$' && !escaped_at(s_.size() - 1)) {
      anchored_end = true;
      s_.pop_back();
    }
    Piece body = alternation();
    if (pos_ != s_.size()) fail(pos_ < s_.size() && s_[pos_] == ')' ? "unbalanced ')'" : "unexpected character");
    std::vector<int32_t> parts;
    const bool search = o_.search;
    if (search && !anchored_start) parts.push_back(any_text());
    parts.push_back(body.node);
    if (search && !anchored_end) parts.push_back(any_text());
    ast_.root = node({RegexNode::Kind::kSeq, {}, parts});
    return std::move(ast_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw SchemaError(o_.keyword, o_.path, str_cat(what, " at offset ", pos_, " (see the supported regex subset)"));
  }
  bool escaped_at(size_t i) const {
    size_t n = 0;
    while (i > n && s_[i - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }
  bool at(char32_t c) const { return pos_ < s_.size() && s_[pos_] == c; }

  int32_t node(RegexNode n) {
    ast_.nodes.push_back(std::move(n));
    return static_cast<int32_t>(ast_.nodes.size() - 1);
  }
  int32_t any_text() {
    const int32_t any = node({RegexNode::Kind::kChars, CharSet::any(), {}});
    return node({RegexNode::Kind::kRepeat, {}, {any}, 0, -1});
  }

  Piece alternation() {
    std::vector<Piece> alts{sequence()};
    while (at('|')) {
      ++pos_;
      alts.push_back(sequence());
    }
    if (alts.size() == 1) return alts[0];
    Piece p;
    p.nullable = false;
    std::vector<int32_t> kids;
    for (Piece& a : alts) {
      p.nullable = p.nullable || a.nullable;
      kids.push_back(a.node);
    }
    p.node = node({RegexNode::Kind::kAlt, {}, kids});
    return p;
  }

  Piece sequence() {
    Piece p;
    std::vector<int32_t> kids;
    while (pos_ < s_.size() && !at('|') && !at(')')) {
      Piece a = atom();
      a = quantified(a);
      kids.push_back(a.node);
      p.nullable = p.nullable && a.nullable;
    }
    p.node = node({RegexNode::Kind::kSeq, {}, kids});
    return p;
  }

  int number() {
    if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9') fail("expected a number in {}");
    long v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = std::min<long>(v * 10 + (s_[pos_++] - '0'), 1L << 30);
    }
    return static_cast<int>(v);
  }

  Piece quantified(Piece a) {
    int min = 1, max = 1;
    if (at('*')) {
      min = 0, max = -1;
    } else if (at('+')) {
      min = 1, max = -1;
    } else if (at('?')) {
      min = 0, max = 1;
    } else if (at('{')) {
      ++pos_;
      min = max = number();
      if (at(',')) {
        ++pos_;
        max = at('}') ? -1 : number();
      }
      if (!at('}')) fail("expected '}'");
      if (max >= 0 && max < min) fail("{m,n} with n < m");
      if (min > o_.max_repeat) fail(str_cat("a repetition count over ", o_.max_repeat));
      if (max > o_.max_repeat) max = o_.max_repeat;  // fewer repeats: tighter, every output still matches
    } else {
      return a;
    }
    ++pos_;
    if (at('?')) ++pos_;  // lazy: the same language
    if (at('*') || at('+') || at('?') || at('{')) fail("a quantifier after a quantifier");
    if (max < 0 && a.nullable) fail("an unbounded repeat of a part that can match empty");
    Piece p;
    p.nullable = a.nullable || min == 0;
    p.node = node({RegexNode::Kind::kRepeat, {}, {a.node}, min, max});
    return p;
  }

  Piece chars(const CharSet& set) {
    if (set.empty()) fail("an empty character class");
    return Piece{node({RegexNode::Kind::kChars, set, {}}), false};
  }

  Piece atom() {
    char32_t c = s_[pos_];
    if (c == '(') {
      ++pos_;
      if (at('?')) {
        if (pos_ + 1 < s_.size() && s_[pos_ + 1] == ':') pos_ += 2;
        else fail("only (?:...) groups are supported (no lookaround or named groups)");
      }
      Piece inner = alternation();
      if (!at(')')) fail("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return chars(char_class());
    if (c == '.') {
      ++pos_;
      CharSet breaks = CharSet::range('\n', '\n');
      breaks.add('\r', '\r');
      breaks.add(0x2028, 0x2029);
      return chars(breaks.complement());
    }
    if (c == '\\') return chars(escape(false).set);
    if (c == '^' || c == '$') fail("anchors are supported only at the start (^) and end ($)");
    if (c == '*' || c == '+' || c == '?' || c == '{') fail("a quantifier with nothing to repeat");
    if (c == ')') fail("unbalanced ')'");
    ++pos_;
    return chars(CharSet::range(c, c));
  }

  struct Escaped {
    CharSet set;
    bool unicode_class = false;  // \d \w \s: a negated class holding one stays ASCII
  };

  uint32_t hex(int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i, ++pos_) {
      if (pos_ >= s_.size()) fail("a short hex escape");
      char32_t h = s_[pos_];
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
            : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) fail("a bad hex digit");
      v = v * 16 + d;
    }
    return v;
  }

  Escaped escape(bool in_class) {
    ++pos_;  // the backslash
    if (pos_ >= s_.size()) fail("a trailing backslash");
    char32_t c = s_[pos_++];
    CharSet digit = CharSet::range('0', '9');
    CharSet word = digit;
    word.add('a', 'z');
    word.add('A', 'Z');
    word.add('_', '_');
    CharSet space = CharSet::range('\t', '\r');  // \t \n \v \f \r
    space.add(' ', ' ');
    const CharSet ascii = CharSet::range(0, 0x7F);
    switch (c) {
      case 'd': return {digit, true};
      case 'w': return {word, true};
      case 's': return {space, true};
      // The negations keep to ASCII: Python's \D excludes every Unicode digit.
      case 'D': return {digit.complement().intersect(ascii), true};
      case 'W': return {word.complement().intersect(ascii), true};
      case 'S': return {space.complement().intersect(ascii), true};
      case 'n': return {CharSet::range('\n', '\n')};
      case 't': return {CharSet::range('\t', '\t')};
      case 'r': return {CharSet::range('\r', '\r')};
      case 'f': return {CharSet::range('\f', '\f')};
      case 'v': return {CharSet::range('\v', '\v')};
      case '0': return {CharSet::range(0, 0)};
      case 'x': { uint32_t v = hex(2); return {CharSet::range(v, v)}; }
      case 'u': { uint32_t v = hex(4); return {CharSet::range(v, v)}; }
      default: break;
    }
    if (c == 'b' && in_class) return {CharSet::range('\b', '\b')};
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
      --pos_;
      fail(str_cat("the escape \\", static_cast<char>(c), " is not supported"));
    }
    return {CharSet::range(c, c)};  // an escaped punctuation character is itself
  }

  CharSet char_class() {
    ++pos_;  // '['
    bool negate = at('^');
    if (negate) ++pos_;
    CharSet set;
    bool unicode_class = false;
    bool first = true;
    while (pos_ < s_.size() && (first || !at(']'))) {
      first = false;
      uint32_t lo;
      if (at('\\')) {
        Escaped e = escape(true);
        unicode_class = unicode_class || e.unicode_class;
        if (e.unicode_class || e.set.ranges().size() != 1 || e.set.ranges()[0].first != e.set.ranges()[0].second) {
          set.add(e.set);
          continue;
        }
        lo = e.set.ranges()[0].first;
      } else {
        lo = s_[pos_++];
      }
      if (at('-') && pos_ + 1 < s_.size() && s_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi;
        if (at('\\')) {
          Escaped e = escape(true);
          if (e.unicode_class) fail("a range ending in a class escape");
          hi = e.set.ranges()[0].first;
        } else {
          hi = s_[pos_++];
        }
        if (hi < lo) fail("a reversed range in a class");
        set.add(lo, hi);
      } else {
        set.add(lo, lo);
      }
    }
    if (!at(']')) fail("missing ']'");
    ++pos_;
    if (!negate) return set;
    CharSet out = set.complement();
    return unicode_class ? out.intersect(CharSet::range(0, 0x7F)) : out;
  }

  std::u32string s_;
  const RegexOptions& o_;
  size_t pos_ = 0;
  RegexAst ast_;
};

Seq emit(GrammarBuilder& b, const RegexAst& ast, int32_t id, CharContext context) {
  const RegexNode& n = ast.nodes[id];
  switch (n.kind) {
    case RegexNode::Kind::kChars:
      return {char_set_rule(b, n.set, context)};
    case RegexNode::Kind::kSeq: {
      Seq out;
      for (int32_t k : n.kids) {
        Seq part = emit(b, ast, k, context);
        out.insert(out.end(), part.begin(), part.end());
      }
      return out;
    }
    case RegexNode::Kind::kAlt: {
      std::vector<Seq> alts;
      for (int32_t k : n.kids) alts.push_back(emit(b, ast, k, context));
      return {GrammarBuilder::rule(b.rule_of(alts))};
    }
    case RegexNode::Kind::kRepeat:
      return {b.repeat(emit(b, ast, n.kids[0], context), n.min, n.max)};
  }
  return {};
}

std::u32string decode_utf8(std::string_view s, const RegexOptions& o) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) throw SchemaError(o.keyword, o.path, "the pattern is not valid UTF-8");
    out.push_back(hf::decode_utf8(s, i, n));
    i += n;
  }
  return out;
}

}  // namespace

RegexAst parse_regex(std::string_view pattern, const RegexOptions& options) {
  if (pattern.size() > options.max_pattern_bytes)
    throw SchemaError(options.keyword, options.path,
                      str_cat("the pattern is longer than ", options.max_pattern_bytes, " bytes"));
  return RegexParser(decode_utf8(pattern, options), options).parse();
}

Sym compile_regex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options) {
  const RegexAst ast = parse_regex(pattern, options);
  b.set_context(options.keyword, options.path);
  return GrammarBuilder::rule(b.rule_of({emit(b, ast, ast.root, options.context)}));
}

}  // namespace flashserve::structured
