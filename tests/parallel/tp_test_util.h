// What the tensor-parallel tests share (CPU and GPU): greedy generation from stories260K's usual
// prompt through a runner, every step's logits kept for comparing runners bit by bit or within a
// tolerance.
#pragma once

#include <algorithm>
#include <vector>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {

// Greedy from BOS + "Once upon a time" for n tokens, the prompt prefilled whole (then one decode
// step per token: CUDA graphs replay them); every step's logits appended to *all_logits.
inline std::vector<int32_t> greedy(ModelRunner& r, int n, std::vector<float>* all_logits) {
  BlockPool pool(r.num_kv_blocks(), 3);
  TestSeq seq;
  seq.tokens = {1, 403, 407, 261, 378};
  const int vocab = r.config().vocab_size;
  std::vector<int32_t> out;
  std::vector<float> logits;
  while (int(out.size()) < n) {
    StepPlan b;
    b.chunks.push_back(seq.chunk(int(seq.tokens.size()) - seq.num_cached, r.block_size(), pool,
                                 LogitsWanted::kLast));
    logits.clear();
    r.step(b, &logits);
    all_logits->insert(all_logits->end(), logits.begin(), logits.end());
    const auto row = logits.end() - vocab;
    out.push_back(int32_t(std::max_element(row, logits.end()) - row));
    seq.tokens.push_back(out.back());
  }
  return out;
}

// A ragged batch through `r`: 5 sequences prefilled in two chunks (every row's logits kept),
// then 3 decode steps; the logits of every step, appended.
inline std::vector<float> ragged_batch_logits(ModelRunner& r) {
  const int vocab = r.config().vocab_size;
  const std::vector<int> lens = {1, 7, 20, 33, 4};
  std::vector<TestSeq> seqs(lens.size());
  for (size_t i = 0; i < lens.size(); ++i) seqs[i].tokens = random_tokens(lens[i] + 3, vocab, 50 + uint32_t(i));
  BlockPool pool(r.num_kv_blocks(), 11);
  std::vector<float> logits;
  auto step = [&](auto n_of) {
    StepPlan b;
    for (size_t i = 0; i < seqs.size(); ++i)
      if (const int n = n_of(i); n > 0) b.chunks.push_back(seqs[i].chunk(n, r.block_size(), pool, LogitsWanted::kAll));
    r.step(b, &logits);
  };
  step([&](size_t i) { return (lens[i] + 1) / 2; });
  step([&](size_t i) { return lens[i] - (lens[i] + 1) / 2; });
  for (int d = 0; d < 3; ++d) step([](size_t) { return 1; });
  return logits;
}

}  // namespace flashserve::test
