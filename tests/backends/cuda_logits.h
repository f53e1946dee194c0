// Helpers for the CUDA model tests: a runner on the CUDA backend, every position's logits of
// sequences decoded one token a step together (pure decode steps: replayed under CUDA graphs
// after the first of a batch size), and the NMSE of logits against a reference.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {

inline std::unique_ptr<ModelRunner> cuda_runner(const LoadedModel& m) {
  ModelRunnerOptions o;
  o.backend = "cuda";
  o.kv_cache_tokens = 4096;
  return ModelRunner::create(m, o);
}

// Every position's logits of each sequence, stepped one token a step with all sequences together.
inline std::vector<std::vector<float>> decode_logits(
    const LoadedModel& m, const std::vector<std::vector<int32_t>>& seqs_ids) {
  auto r = cuda_runner(m);
  BlockPool pool(r->num_kv_blocks(), 5);
  std::vector<TestSeq> seqs(seqs_ids.size());
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].tokens = seqs_ids[i];
  const size_t vocab = size_t(m.config().vocab_size);
  std::vector<std::vector<float>> out(seqs.size());
  std::vector<float> logits;
  for (size_t t = 0; t < seqs_ids[0].size(); ++t) {
    StepPlan b;
    for (TestSeq& s : seqs) b.chunks.push_back(s.chunk(1, r->block_size(), pool, LogitsWanted::kLast));
    logits.clear();
    r->step(b, &logits);
    for (size_t i = 0; i < seqs.size(); ++i)
      out[i].insert(out[i].end(), logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
  }
  return out;
}

inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? num / den : num;
}

}  // namespace flashserve::test
