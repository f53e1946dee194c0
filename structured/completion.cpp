// Fewest-bytes lengths of rules and alternative suffixes, by repeated relaxation.
#include "structured/completion.h"

#include <algorithm>

namespace flashserve::structured {

std::vector<int64_t> suffix_min_lengths(const Grammar& g) {
  constexpr int kMaxPasses = 64;
  std::vector<int64_t> rule_min(g.rules.size(), kNoCompletion);
  auto element_min = [&](const Element& e) -> int64_t {
    return e.kind == Element::Kind::kBytes ? 1 : e.kind == Element::Kind::kRule ? rule_min[e.id] : 0;
  };
  std::vector<int64_t> suffix(g.elements.size(), 0);
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    bool changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      for (int32_t start : g.rules[r]) {
        int64_t total = 0;
        for (int32_t p = start; g.elements[p].kind != Element::Kind::kEnd; ++p)
          total = std::min(kNoCompletion, total + element_min(g.elements[p]));
        if (total < rule_min[r]) {
          rule_min[r] = total;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  // Suffix sums, walking each alternative backwards from its end.
  for (int64_t p = static_cast<int64_t>(g.elements.size()) - 1; p >= 0; --p) {
    const Element& e = g.elements[p];
    suffix[p] = e.kind == Element::Kind::kEnd ? 0 : std::min(kNoCompletion, element_min(e) + suffix[p + 1]);
  }
  return suffix;
}

}  // namespace flashserve::structured
