// Scheduler: chunked prefill, decode priority, FIFO admission, LIFO recompute-preemption, and a
// randomized arrival simulation against a fake model whose "KV cache" stores token ids, so a
// wrong block table or a bad recompute changes the generated tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "core/error.h"
#include "scheduling/scheduler.h"

namespace flashserve {
namespace {

constexpr int kVocab = 1000;

// Next token of the fake model: a hash of the whole prefix, read through the cache.
int32_t next_token(const std::vector<int32_t>& prefix) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : prefix) h = (h ^ static_cast<uint64_t>(t + 7)) * 1099511628211ull;
  return static_cast<int32_t>(h % kVocab);
}

std::vector<int32_t> solo_output(const std::vector<int32_t>& prompt, int max_tokens) {
  std::vector<int32_t> all = prompt;
  for (int i = 0; i < max_tokens; ++i) all.push_back(next_token(all));
  return {all.begin() + prompt.size(), all.end()};
}

// Executes StepPlanes against a token-id "KV cache" [num_blocks * block_size].
class FakeModel {
 public:
  FakeModel(int num_blocks, int block_size) : bs_(block_size), kv_(num_blocks * block_size, -1) {}

  // Returns one next-token per logits row, in batch order.
  std::vector<int32_t> step(const StepPlan& batch) {
    std::vector<int32_t> rows;
    for (const StepChunk& c : batch.chunks) {
      const auto& table = *c.block_table;
      EXPECT_GE(static_cast<int>(table.size()) * bs_, c.num_cached + c.num_tokens);
      for (int i = 0; i < c.num_tokens; ++i) kv_[slot(table, c.num_cached + i)] = c.tokens[i];
      auto row_at = [&](int pos) {
        std::vector<int32_t> prefix;
        for (int p = 0; p <= pos; ++p) prefix.push_back(kv_[slot(table, p)]);
        return next_token(prefix);
      };
      int end = c.num_cached + c.num_tokens;
      if (c.logits == LogitsWanted::kLast) rows.push_back(row_at(end - 1));
      if (c.logits == LogitsWanted::kAll) {
        for (int p = c.num_cached; p < end; ++p) rows.push_back(row_at(p));
      }
    }
    return rows;
  }

 private:
  int slot(const std::vector<BlockId>& table, int pos) const {
    return table[pos / bs_] * bs_ + pos % bs_;
  }
  int bs_;
  std::vector<int32_t> kv_;
};

std::unique_ptr<Sequence> make_seq(uint64_t id, int prompt_len, int max_tokens,
                                   bool prompt_logprobs = false) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  for (int i = 0; i < prompt_len; ++i) s->tokens.push_back(static_cast<int32_t>((id * 31 + i) % kVocab));
  s->num_prompt_tokens = prompt_len;
  s->max_tokens = max_tokens;
  s->need_prompt_logprobs = prompt_logprobs;
  return s;
}

// Checks the invariants every schedule() must keep.
void check_step(const Scheduler& sched, const BlockAllocator& blocks, const SchedulerOutput& out) {
  const SchedulerConfig& cfg = sched.config();
  ASSERT_LE(out.num_batched_tokens(), cfg.max_num_batched_tokens);
  ASSERT_LE(sched.num_running(), cfg.max_num_seqs);
  std::set<BlockId> owned;
  int used = 0;
  uint64_t max_running = 0;
  for (const auto& s : sched.running()) {
    max_running = std::max(max_running, s->id);
    for (BlockId b : s->block_table) ASSERT_TRUE(owned.insert(b).second) << "block shared";
    used += static_cast<int>(s->block_table.size());
  }
  for (const auto& s : sched.waiting()) {
    ASSERT_TRUE(s->block_table.empty()) << "waiting sequence holds blocks";
    ASSERT_EQ(s->num_computed, 0);
    ASSERT_GT(s->id, max_running) << "a newer request runs while an older one waits";
  }
  ASSERT_EQ(used, blocks.num_used()) << "leaked or double-counted blocks";
  std::set<const Sequence*> seen;
  for (const ScheduledChunk& c : out.chunks) {
    ASSERT_TRUE(seen.insert(c.seq).second) << "sequence scheduled twice";
    ASSERT_EQ(c.seq->status, SeqStatus::kRunning);
    ASSERT_GE(c.num_tokens, 1);
    ASSERT_LE(c.num_tokens, c.seq->num_pending());
    ASSERT_GE(static_cast<int>(c.seq->block_table.size()) * cfg.block_size,
              c.seq->num_computed + c.num_tokens);
    bool ends = c.seq->num_computed + c.num_tokens == c.seq->num_tokens();
    bool in_prompt = c.seq->num_computed < c.seq->num_prompt_tokens;
    LogitsWanted want = c.seq->need_prompt_logprobs && in_prompt ? LogitsWanted::kAll
                        : ends                                   ? LogitsWanted::kLast
                                                                 : LogitsWanted::kNone;
    ASSERT_EQ(c.logits, want);
  }
  for (uint64_t p : out.preempted) ASSERT_GT(p, max_running) << "preempted not the newest";
}

struct SimResult {
  std::map<uint64_t, std::vector<int32_t>> outputs;
  uint64_t preemptions = 0;
  int steps = 0;
};

// Runs requests arriving at random steps to completion; checks invariants every step.
SimResult simulate(const SchedulerConfig& cfg, int num_blocks, int num_requests, uint32_t seed,
                   int max_prompt, int max_gen) {
  std::mt19937 rng(seed);
  BlockAllocator blocks(num_blocks);
  Scheduler sched(cfg, &blocks);
  FakeModel model(num_blocks, cfg.block_size);
  struct Pending {
    int arrival_step;
    std::unique_ptr<Sequence> seq;
  };
  std::vector<Pending> arrivals;
  std::map<uint64_t, std::pair<std::vector<int32_t>, int>> inputs;
  int t = 0;
  for (int i = 0; i < num_requests; ++i) {
    t += rng() % 3;
    int plen = 1 + rng() % max_prompt;
    int gen = 1 + rng() % max_gen;
    while (!sched.fits_in_cache(plen + gen)) gen = std::max(1, gen / 2), plen = std::max(1, plen / 2);
    auto s = make_seq(i + 1, plen, gen, rng() % 4 == 0);
    inputs[s->id] = {s->tokens, gen};
    arrivals.push_back({t, std::move(s)});
  }
  SimResult res;
  size_t next_arrival = 0;
  for (int step = 0;; ++step) {
    while (next_arrival < arrivals.size() && arrivals[next_arrival].arrival_step <= step) {
      sched.add(std::move(arrivals[next_arrival++].seq));
    }
    if (!sched.has_work()) {
      if (next_arrival == arrivals.size()) break;
      continue;
    }
    // Which running sequences are decoding before this step (decodes go first).
    std::set<uint64_t> decoding;
    for (const auto& s : sched.running()) {
      if (s->num_pending() == 1) decoding.insert(s->id);
    }
    SchedulerOutput out = sched.schedule();
    check_step(sched, blocks, out);
    EXPECT_FALSE(out.empty()) << "no progress at step " << step;
    if (out.empty()) break;
    int decodes_scheduled = 0;
    for (const ScheduledChunk& c : out.chunks) decodes_scheduled += decoding.count(c.seq->id);
    int decodes_left = 0;
    for (uint64_t id : decoding) {
      bool preempted = std::count(out.preempted.begin(), out.preempted.end(), id) > 0;
      decodes_left += !preempted;
    }
    // Every surviving decode ran, unless decodes alone filled the budget.
    if (decodes_scheduled < decodes_left) {
      EXPECT_EQ(decodes_scheduled, cfg.max_num_batched_tokens);
    }
    std::vector<int32_t> rows = model.step(out.to_step_plan());
    sched.commit(out);
    size_t r = 0;
    std::vector<uint64_t> done;
    for (const ScheduledChunk& c : out.chunks) {
      Sequence* s = c.seq;
      if (c.logits == LogitsWanted::kNone) continue;
      int nrows = c.logits == LogitsWanted::kAll ? c.num_tokens : 1;
      r += nrows;
      if (c.logits == LogitsWanted::kAll && s->num_computed >= s->num_prompt_tokens) {
        s->need_prompt_logprobs = false;  // the engine delivers them here
      }
      if (s->num_computed < s->num_tokens()) continue;  // a kAll chunk in mid-prompt
      s->tokens.push_back(rows[r - 1]);
      if (s->num_generated() >= s->max_tokens) done.push_back(s->id);
    }
    EXPECT_EQ(r, rows.size());
    for (uint64_t id : done) {
      Sequence* s = sched.find(id);
      res.outputs[id] = {s->tokens.begin() + s->num_prompt_tokens, s->tokens.end()};
      EXPECT_TRUE(sched.remove(id));
    }
    res.steps = step;
    if (step > 100000) {
      ADD_FAILURE() << "simulation did not finish";
      break;
    }
  }
  EXPECT_EQ(blocks.num_used(), 0) << "leaked blocks";
  EXPECT_EQ(res.outputs.size(), static_cast<size_t>(num_requests)) << "unfinished requests";
  for (const auto& [id, in] : inputs) {
    EXPECT_EQ(res.outputs[id], solo_output(in.first, in.second)) << "request " << id;
  }
  res.preemptions = sched.num_preemptions();
  return res;
}

TEST(Scheduler, ChunksALongPromptUnderTheBudget) {
  BlockAllocator blocks(64);
  Scheduler sched({8, 32, 16}, &blocks);
  sched.add(make_seq(1, 100, 4));
  std::vector<int> sizes;
  std::vector<LogitsWanted> kinds;
  for (int i = 0; i < 4; ++i) {
    SchedulerOutput out = sched.schedule();
    ASSERT_EQ(out.chunks.size(), 1u);
    sizes.push_back(out.chunks[0].num_tokens);
    kinds.push_back(out.chunks[0].logits);
    sched.commit(out);
  }
  EXPECT_EQ(sizes, (std::vector<int>{32, 32, 32, 4}));
  EXPECT_EQ(kinds, (std::vector<LogitsWanted>{LogitsWanted::kNone, LogitsWanted::kNone,
                                              LogitsWanted::kNone, LogitsWanted::kLast}));
  EXPECT_EQ(blocks.num_used(), 7);  // ceil(100 / 16)
  sched.find(1)->tokens.push_back(5);
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].num_tokens, 1);
  EXPECT_EQ(out.chunks[0].logits, LogitsWanted::kLast);
  EXPECT_TRUE(sched.remove(1));
  EXPECT_EQ(blocks.num_used(), 0);
}

TEST(Scheduler, PromptLogprobsAskForAllRowsOfPromptChunks) {
  BlockAllocator blocks(64);
  Scheduler sched({8, 40, 16}, &blocks);
  sched.add(make_seq(1, 50, 2, /*prompt_logprobs=*/true));
  SchedulerOutput a = sched.schedule();
  EXPECT_EQ(a.chunks[0].logits, LogitsWanted::kAll);
  sched.commit(a);
  SchedulerOutput b = sched.schedule();
  EXPECT_EQ(b.chunks[0].num_tokens, 10);
  EXPECT_EQ(b.chunks[0].logits, LogitsWanted::kAll);
}

TEST(Scheduler, DecodesRunWhileALongPromptIsChunked) {
  BlockAllocator blocks(200);
  Scheduler sched({8, 64, 16}, &blocks);
  for (uint64_t id = 1; id <= 5; ++id) sched.add(make_seq(id, 3, 1000));
  SchedulerOutput first = sched.schedule();  // all five prefill in one step
  ASSERT_EQ(first.chunks.size(), 5u);
  sched.commit(first);
  for (uint64_t id = 1; id <= 5; ++id) sched.find(id)->tokens.push_back(1);
  sched.add(make_seq(6, 1000, 10));
  for (int step = 0; step < 10; ++step) {
    SchedulerOutput out = sched.schedule();
    ASSERT_EQ(out.chunks.size(), 6u);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(out.chunks[i].num_tokens, 1) << "decode first";
    EXPECT_EQ(out.chunks[5].seq->id, 6u);
    EXPECT_EQ(out.chunks[5].num_tokens, 64 - 5) << "prefill fills the remaining budget";
    sched.commit(out);
    for (uint64_t id = 1; id <= 5; ++id) sched.find(id)->tokens.push_back(1);
  }
}

TEST(Scheduler, AdmissionIsFifoAndBoundedByMaxNumSeqs) {
  BlockAllocator blocks(100);
  Scheduler sched({2, 512, 16}, &blocks);
  for (uint64_t id = 1; id <= 4; ++id) sched.add(make_seq(id, 10, 5));
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq->id, 1u);
  EXPECT_EQ(out.chunks[1].seq->id, 2u);
  sched.commit(out);
  sched.find(2)->tokens.push_back(1);
  sched.remove(1);
  out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq->id, 2u);
  EXPECT_EQ(out.chunks[1].seq->id, 3u);
}

TEST(Scheduler, HeadOfQueueIsNotSkippedWhenItDoesNotFit) {
  BlockAllocator blocks(4);  // 64 tokens
  Scheduler sched({8, 512, 16}, &blocks);
  sched.add(make_seq(1, 40, 8));  // 3 blocks
  SchedulerOutput a = sched.schedule();
  sched.commit(a);
  sched.find(1)->tokens.push_back(1);
  sched.add(make_seq(2, 60, 1));  // needs 4 blocks; only 1 free: waits
  sched.add(make_seq(3, 2, 1));   // would fit, but must not overtake 2
  SchedulerOutput b = sched.schedule();
  ASSERT_EQ(b.chunks.size(), 1u);
  EXPECT_EQ(b.chunks[0].seq->id, 1u);
  EXPECT_EQ(sched.num_waiting(), 2);
  EXPECT_EQ(sched.waiting().front()->id, 2u);
  sched.commit(b);
  sched.remove(1);
  SchedulerOutput c = sched.schedule();  // 2 is admitted once there is room, before 3
  ASSERT_GE(c.chunks.size(), 1u);
  EXPECT_EQ(c.chunks[0].seq->id, 2u);
  EXPECT_EQ(c.chunks[0].num_tokens, 60);
}

TEST(Scheduler, AdmissionLeavesTheRunningSequencesTheirNextBlock) {
  // Sequence 1 decodes and crosses into a new block every 16 tokens. Sequence 2's prompt (40
  // tokens, 3 blocks) fits the cache only once 1 is done. Admitting 2 into the blocks 1 is about
  // to need would get 2 preempted the next step and its prefill thrown away, over and over.
  BlockAllocator blocks(4);  // 64 tokens
  Scheduler sched({8, 512, 16}, &blocks);
  sched.add(make_seq(1, 16, 24));
  sched.add(make_seq(2, 40, 4));
  int prefill_tokens_of_2 = 0, steps = 0;
  while (sched.has_work() && steps++ < 200) {
    SchedulerOutput out = sched.schedule();
    ASSERT_FALSE(out.empty());
    sched.commit(out);
    std::vector<uint64_t> done;
    for (const ScheduledChunk& c : out.chunks) {
      Sequence* s = c.seq;
      if (s->id == 2 && s->num_generated() == 0) prefill_tokens_of_2 += c.num_tokens;
      if (c.logits == LogitsWanted::kNone) continue;
      s->tokens.push_back(7);
      if (s->num_generated() >= s->max_tokens) done.push_back(s->id);
    }
    for (uint64_t id : done) sched.remove(id);
  }
  EXPECT_FALSE(sched.has_work());
  EXPECT_EQ(sched.num_preemptions(), 0u);
  EXPECT_EQ(prefill_tokens_of_2, 40) << "sequence 2's prompt was computed more than once";
  EXPECT_EQ(blocks.num_used(), 0);
}

TEST(Scheduler, PreemptsNewestFirstAndResumesWithGeneratedTokens) {
  BlockAllocator blocks(4);  // 64 tokens
  Scheduler sched({8, 512, 16}, &blocks);
  sched.add(make_seq(1, 8, 40));
  sched.add(make_seq(2, 8, 40));
  sched.add(make_seq(3, 8, 40));
  SchedulerOutput out = sched.schedule();  // all three admitted: 3 blocks used, 1 free
  ASSERT_EQ(out.chunks.size(), 3u);
  sched.commit(out);
  // Decode each until its first block is full (16 tokens computed) and a 17th is sampled.
  for (int t = 0; t < 9; ++t) {
    for (uint64_t id = 1; id <= 3; ++id) sched.find(id)->tokens.push_back(static_cast<int32_t>(id));
    if (t == 8) break;  // the 17th token's K/V is written by the next step
    out = sched.schedule();
    ASSERT_TRUE(out.preempted.empty());
    sched.commit(out);
  }
  // Each now needs a second block; one is free: 1 takes it, 2 preempts 3 (the newest).
  out = sched.schedule();
  EXPECT_EQ(out.preempted, (std::vector<uint64_t>{3}));
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(sched.num_running(), 2);
  ASSERT_EQ(sched.waiting().front()->id, 3u);
  EXPECT_EQ(sched.waiting().front()->num_tokens(), 17) << "generated tokens kept";
  EXPECT_EQ(sched.waiting().front()->num_computed, 0);
  EXPECT_TRUE(sched.waiting().front()->block_table.empty());
  EXPECT_EQ(sched.num_preemptions(), 1u);
  sched.commit(out);
  sched.remove(1);
  sched.remove(2);
  out = sched.schedule();  // resumes 3: recompute all 17 tokens, then sample
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].seq->id, 3u);
  EXPECT_EQ(out.chunks[0].num_tokens, 17);
  EXPECT_EQ(out.chunks[0].logits, LogitsWanted::kLast);
}

TEST(Scheduler, FitsInCache) {
  BlockAllocator blocks(4);
  Scheduler sched({8, 512, 16}, &blocks);
  EXPECT_TRUE(sched.fits_in_cache(64));
  EXPECT_FALSE(sched.fits_in_cache(65));
}

TEST(Scheduler, RemoveFreesBlocksOfRunningAndWaiting) {
  BlockAllocator blocks(10);
  Scheduler sched({1, 512, 16}, &blocks);
  sched.add(make_seq(1, 30, 5));
  sched.add(make_seq(2, 30, 5));
  SchedulerOutput out = sched.schedule();
  sched.commit(out);
  EXPECT_EQ(blocks.num_used(), 2);
  EXPECT_TRUE(sched.remove(2));  // waiting
  EXPECT_TRUE(sched.remove(1));  // running
  EXPECT_FALSE(sched.remove(1));
  EXPECT_EQ(blocks.num_used(), 0);
  EXPECT_FALSE(sched.has_work());
}

TEST(SchedulerSim, AmpleCacheNoPreemption) {
  SimResult r = simulate({16, 64, 16}, 400, 60, 1, 120, 40);
  EXPECT_EQ(r.preemptions, 0u);
}

TEST(SchedulerSim, TinyCachePreemptsAndStillMatchesSolo) {
  SimResult r = simulate({16, 64, 16}, 12, 60, 2, 100, 60);
  EXPECT_GT(r.preemptions, 0u);
}

TEST(SchedulerSim, RandomConfigs) {
  std::mt19937 rng(99);
  uint64_t total_preemptions = 0;
  for (int trial = 0; trial < 200; ++trial) {
    SchedulerConfig cfg;
    cfg.block_size = 1 + rng() % 32;
    cfg.max_num_seqs = 1 + rng() % 12;
    cfg.max_num_batched_tokens = 1 + rng() % 100;
    int num_blocks = 2 + rng() % 40;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " bs " << cfg.block_size << " seqs "
                                      << cfg.max_num_seqs << " budget "
                                      << cfg.max_num_batched_tokens << " blocks " << num_blocks);
    SimResult r = simulate(cfg, num_blocks, 40, 1000 + trial, 80, 40);
    total_preemptions += r.preemptions;
    if (HasFailure()) break;
  }
  EXPECT_GT(total_preemptions, 0u);
}

}  // namespace
}  // namespace flashserve
