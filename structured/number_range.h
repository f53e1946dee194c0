// Exact grammars for bounded JSON numbers: integers in [lo, hi] (either bound optional), built
// digit by digit, and non-integers whose bounds are whole numbers (no exponent is generated).
#pragma once

#include <cstdint>
#include <optional>

#include "structured/grammar.h"

namespace flashserve::structured {

// Integers n with lo <= n <= hi, in JSON's form (no leading zeros; "-0" is not generated).
Sym integer_range(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi);

// Numbers x with lo <= x <= hi: an integer part and an optional fraction, no exponent.
Sym number_range(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace flashserve::structured
