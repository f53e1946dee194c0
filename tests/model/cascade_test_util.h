// Helpers for the cascade attention tests (CPU and GPU): a decode step whose sequences share
// leading blocks, laid out as StepPlan arrays, with a random K/V cache and queries; and whole
// sequences sharing a prompt prefix run through a ModelRunner.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/model_runner.h"
#include "model/step.h"
#include "tests/common/test_tensor_parallel.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {

// Cascade settings for the model tests: on or off, and when on, any sharing pays (the test
// models are small) and the shared prefix is cut into parts of 2 blocks.
inline CascadeConfig test_cascade(bool enabled) {
  CascadeConfig c;
  c.enabled = enabled;
  c.min_saved_bytes = 1;
  c.part_blocks = 2;
  return c;
}

// A random 4-head model (seed 7) in a fresh folder and two runners over it (blocks of 16
// tokens) that differ only in cascade attention: off and on (test_cascade). The model outlives
// them.
struct CascadePair {
  std::unique_ptr<LoadedModel> model;
  std::unique_ptr<ModelRunner> plain, cascade;
};
inline CascadePair cascade_pair(const std::string& backend, int64_t kv_cache_tokens,
                                int threads = 0) {
  ModelRunnerOptions o;
  o.backend = backend;
  o.block_size = 16;
  o.kv_cache_tokens = kv_cache_tokens;
  o.threads = threads;
  CascadePair p;
  const std::string dir = fresh_dir("model");
  write_random_hf_model(dir, small_config(256, 4, 2, 64, false), 7, DType::kF32, 1, 0.08f);
  p.model = load_model(dir);
  o.cascade = test_cascade(false);
  p.plain = ModelRunner::create(*p.model, with_test_tensor_parallel(o));
  o.cascade = test_cascade(true);
  p.cascade = ModelRunner::create(*p.model, with_test_tensor_parallel(o));
  return p;
}

// A decode step: groups of sequences holding the same first `shared` blocks, then each its own.
struct SharedStepSpec {
  std::vector<int> group_sizes;    // sequences per group (1: a sequence sharing nothing)
  std::vector<int> shared_blocks;  // per group: blocks its members share
  int max_own_tokens = 100;        // each sequence adds 1 .. this many tokens of its own
  int block_size = 16;
};

// Fills `step`'s arrays (tokens are zeros: attention never reads them) with shuffled block ids
// and returns the number of blocks used. Table slots past a sequence's blocks hold -1.
inline int make_shared_step(const SharedStepSpec& spec, uint32_t seed, StepPlan* step) {
  std::mt19937 rng(seed);
  const int bs = spec.block_size;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> kv_lens;
  int next_block = 0;
  for (size_t g = 0; g < spec.group_sizes.size(); ++g) {
    std::vector<int32_t> shared(size_t(spec.shared_blocks[g]));
    for (auto& b : shared) b = next_block++;
    for (int m = 0; m < spec.group_sizes[g]; ++m) {
      const int own = 1 + int(rng() % uint32_t(spec.max_own_tokens));
      std::vector<int32_t> t = shared;
      const int kv = int(shared.size()) * bs + own;
      while (int(t.size()) * bs < kv) t.push_back(next_block++);
      tables.push_back(t);
      kv_lens.push_back(kv);
    }
  }
  // Shuffle physical ids so that sharing is by id, not by position in memory.
  std::vector<int32_t> perm(static_cast<size_t>(next_block));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  const int n = int(tables.size());
  int stride = 0;
  for (auto& t : tables) stride = std::max(stride, int(t.size()));
  step->num_seqs = n;
  step->max_q_len = 1;
  step->max_blocks_per_seq = stride;
  step->tokens.assign(size_t(n), 0);
  step->positions.clear();
  step->cu_q_lens.resize(size_t(n) + 1);
  std::iota(step->cu_q_lens.begin(), step->cu_q_lens.end(), 0);
  step->kv_lens = kv_lens;
  step->max_kv_len = *std::max_element(kv_lens.begin(), kv_lens.end());
  step->block_table.assign(size_t(n) * size_t(stride), -1);
  for (int b = 0; b < n; ++b)
    for (size_t i = 0; i < tables[size_t(b)].size(); ++i)
      step->block_table[size_t(b) * size_t(stride) + i] = perm[size_t(tables[size_t(b)][i])];
  return next_block;
}

// N(0.5, 1) values (off-centre, so outputs have a non-zero mean).
inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.5f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// `num_seqs` sequences whose prompts start with the same `shared` tokens (a multiple of the block
// size): the first computes them, the others adopt its blocks as the prefix cache does and
// prefill only their own `own` tokens, all in one step; then `decodes` decode steps of the whole
// batch feeding fixed tokens. Returns the decode steps' logits.
inline std::vector<float> run_shared_prefix(ModelRunner& r, int num_seqs, int shared, int own,
                                            int decodes, uint32_t seed) {
  const int bs = r.block_size(), vocab = r.config().vocab_size;
  EXPECT_EQ(shared % bs, 0);
  BlockPool pool(r.num_kv_blocks(), seed);
  const std::vector<int32_t> prefix = random_tokens(shared, vocab, seed);
  std::vector<TestSeq> seqs(static_cast<size_t>(num_seqs));
  std::vector<float> logits;
  for (int i = 0; i < num_seqs; ++i) {
    seqs[size_t(i)].tokens = prefix;
    for (int32_t t : random_tokens(own, vocab, seed + 1 + uint32_t(i))) seqs[size_t(i)].tokens.push_back(t);
  }
  StepPlan first;
  first.chunks.push_back(seqs[0].chunk(shared + own, bs, pool, LogitsWanted::kLast));
  r.step(first, &logits);
  StepPlan rest;
  for (int i = 1; i < num_seqs; ++i) {
    TestSeq& s = seqs[size_t(i)];
    s.blocks.assign(seqs[0].blocks.begin(), seqs[0].blocks.begin() + shared / bs);
    s.num_cached = shared;
    rest.chunks.push_back(s.chunk(own, bs, pool, LogitsWanted::kLast));
  }
  if (!rest.chunks.empty()) r.step(rest, &logits);
  logits.clear();
  for (int step = 0; step < decodes; ++step) {
    StepPlan d;
    for (int i = 0; i < num_seqs; ++i) {
      TestSeq& s = seqs[size_t(i)];
      s.tokens.push_back(int32_t((step * 7 + i * 3 + 1) % vocab));
      d.chunks.push_back(s.chunk(1, bs, pool, LogitsWanted::kLast));
    }
    r.step(d, &logits);
  }
  return logits;
}

}  // namespace flashserve::test
