// A tokenizer's vocabulary stretched to a larger size, standing in for a tokenizer that is not
// at hand (e.g. a 128k one where only Llama 2's 32000 pieces exist). Shared by the benchmarks
// that time grammar work over a vocabulary: bench_structured_compile and bench_e2e.
#pragma once

#include <random>
#include <string>

#include "structured/token_vocabulary.h"

namespace flashserve::bench {

// Grows `v` to `n` tokens with pieces made of two existing ones (a fixed seed, so every run and
// every program gets the same vocabulary); a join longer than 23 bytes keeps its first piece.
// The added tokens are never stop tokens. Does nothing when `v` already has `n` or more.
inline void stretch_vocabulary(structured::TokenVocabulary& v, int n) {
  std::mt19937 rng(7);
  const int base = v.vocab_size();
  while (v.vocab_size() < n) {
    const std::string& a = v.token_bytes[rng() % base];
    const std::string& b = v.token_bytes[rng() % base];
    v.token_bytes.push_back(a.size() + b.size() < 24 ? a + b : a);
  }
}

}  // namespace flashserve::bench
