// The intersection of regular languages with a length bound, for JSON Schema strings that carry
// several constraints at once: `pattern` with `minLength`/`maxLength`, `format` with lengths, and
// `pattern` with `format`. Each regex becomes a Thompson automaton over code-point sets; a subset
// construction runs them side by side with the character count, and every product state from
// which an accepting one is reachable becomes a rule (so no prefix leads to a dead end).
#pragma once

#include <string>
#include <vector>

#include "structured/char_set.h"
#include "structured/grammar.h"
#include "structured/regex_compiler.h"

namespace flashserve::structured {

struct ProductLimits {
  // Past these the constraint falls to the keyword policy; they keep compile time in milliseconds.
  size_t max_nfa_states = 4096;  // per regex, after unrolling counted repeats
  size_t max_states = 2048;      // product states
};

// The strings all `regexes` match, of min_len..max_len characters (max_len < 0: unbounded), as
// one rule (characters written as in `context`). Throws SchemaError(keyword, path) past the
// limits or when no string fits.
Sym intersect_regexes(GrammarBuilder& b, const std::vector<RegexAst>& regexes, int min_len, int max_len,
                      CharContext context, const std::string& keyword, const std::string& path,
                      const ProductLimits& limits = {});

}  // namespace flashserve::structured
