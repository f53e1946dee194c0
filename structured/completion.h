// Shortest completions: for every grammar position, the fewest bytes that finish its alternative.
// With them a parser state knows how far it is from accepting, and a caller can finish an output
// by the shortest way (a token budget running out, tests that must end their random walks).
#pragma once

#include <cstdint>
#include <vector>

#include "structured/grammar.h"

namespace flashserve::structured {

constexpr int64_t kNoCompletion = int64_t{1} << 40;

// [elements.size()]: the fewest bytes from each position to its alternative's end.
// Rules are relaxed in creation order (children are mostly built first), a bounded number of
// passes; a rule that does not settle keeps kNoCompletion (the grammar is still exact, only
// completion gets less precise).
std::vector<int64_t> suffix_min_lengths(const Grammar& g);

}  // namespace flashserve::structured
