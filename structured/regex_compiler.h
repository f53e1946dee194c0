// A regular-expression subset compiled to grammar: JSON Schema `pattern` (inside a JSON string,
// search semantics) and guided_regex (raw text, whole-match). The subset, shared by ECMAScript
// and Python's re so that either engine agrees with what we generate:
//   literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH, an escaped punctuation character),
//   . (any character but line breaks), classes [...] with ranges and ^ negation, \d \w \s and
//   their negations (ASCII meaning), groups (...) and (?:...), alternation |, quantifiers ? * +
//   {m} {m,} {m,n} (a trailing lazy ? is accepted), ^ only at the start and $ only at the end.
// Anything else (backreferences, lookaround, \b, \p{...}, named groups) is a SchemaError.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "structured/char_set.h"
#include "structured/grammar.h"

namespace flashserve::structured {

struct RegexOptions {
  CharContext context = CharContext::kRaw;
  bool search = false;  // true: a missing ^ or $ lets any text come before or after
  size_t max_pattern_bytes = 4096;
  int max_repeat = 1000;  // the largest m or n in {m,n}
  std::string keyword = "pattern", path;  // what errors name
};

// A parsed pattern: characters (code point sets), sequences, alternatives and repeats. With
// search semantics the any-text around an unanchored pattern is part of it.
struct RegexNode {
  enum class Kind { kChars, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kSeq;
  CharSet set;                  // kChars: one character of the set
  std::vector<int32_t> kids;    // kSeq, kAlt; kRepeat: the one repeated
  int min = 0, max = 0;         // kRepeat; max < 0: unbounded
};
struct RegexAst {
  std::vector<RegexNode> nodes;
  int32_t root = 0;
};

// Throws SchemaError(options.keyword, options.path) outside the subset.
RegexAst parse_regex(std::string_view pattern, const RegexOptions& options);
// A rule matching the pattern's language (without quotes in the JSON context).
Sym compile_regex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options);

}  // namespace flashserve::structured
