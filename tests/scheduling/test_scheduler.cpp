// Scheduler: chunked prefill, decode priority, FIFO admission, LIFO recompute-preemption, and a
// randomized arrival simulation against a fake model whose "KV cache" stores token ids, so a
// wrong block table, a bad recompute or a wrongly adopted cached block changes the generated
// tokens. The simulations run with prefix caching on (the default) and off, with and without
// prompts that share prefixes.
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
  std::map<BlockId, int> holders;  // blocks are shared only through the prefix cache
  uint64_t max_running = 0;
  for (const auto& s : sched.running()) {
    max_running = std::max(max_running, s->id);
    std::set<BlockId> own(s->block_table.begin(), s->block_table.end());
    ASSERT_EQ(own.size(), s->block_table.size()) << "a block twice in one table";
    for (BlockId b : s->block_table) ++holders[b];
  }
  for (const auto& [b, n] : holders) {
    ASSERT_EQ(blocks.ref_count(b), n) << "block " << b;
    if (n > 1) ASSERT_TRUE(cfg.enable_prefix_caching) << "block " << b << " shared";
  }
  blocks.check_consistent();
  // Arrival order holds, except that a short request may pass a longer one (at most max_bypass
  // times each) and a request may wait a step for a block another one is computing.
  const bool strict_fifo = cfg.short_prefill_tokens == 0 && !cfg.enable_prefix_caching;
  for (const auto& s : sched.waiting()) {
    ASSERT_TRUE(s->block_table.empty()) << "waiting sequence holds blocks";
    ASSERT_EQ(s->num_computed, 0);
    if (strict_fifo) ASSERT_GT(s->id, max_running) << "a newer request runs while an older one waits";
    ASSERT_LE(s->num_bypassed, cfg.max_bypass) << "sequence " << s->id;
  }
  for (const auto& s : sched.running()) ASSERT_LE(s->num_bypassed, cfg.max_bypass);
  for (size_t i = 1; i < sched.running().size(); ++i)
    ASSERT_LT(sched.running()[i - 1]->id, sched.running()[i]->id) << "running not in arrival order";
  for (size_t i = 1; i < sched.waiting().size(); ++i)
    ASSERT_LT(sched.waiting()[i - 1]->id, sched.waiting()[i]->id) << "waiting not in arrival order";
  ASSERT_EQ(static_cast<int>(holders.size()), blocks.num_used()) << "leaked or double-counted blocks";
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
  uint64_t prefix_hit_tokens = 0;
  int steps = 0;
};

// Runs requests arriving at random steps to completion; checks invariants every step. With
// `shared_prefix` > 0 every prompt starts with one of three fixed prefixes of up to that many
// tokens (a system prompt, a conversation so far).
SimResult simulate(const SchedulerConfig& cfg, int num_blocks, int num_requests, uint32_t seed,
                   int max_prompt, int max_gen, int shared_prefix = 0) {
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
    if (shared_prefix > 0) {
      const int which = static_cast<int>(rng() % 3);
      for (int j = 0; j < std::min(plen, shared_prefix); ++j) s->tokens[j] = 500 + which * 7 + j;
    }
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
  blocks.check_consistent();
  if (!cfg.enable_prefix_caching) EXPECT_EQ(blocks.num_cached(), 0);
  res.prefix_hit_tokens = sched.prefix_hit_tokens();
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

// Runs the scheduler until `id` has generated `gen` tokens (token 7 each), or nothing is left.
void run_until_generated(Scheduler& sched, uint64_t id, int gen) {
  for (int steps = 0; steps < 1000; ++steps) {
    Sequence* s = sched.find(id);
    if (!s || s->num_generated() >= gen) return;
    SchedulerOutput out = sched.schedule();
    ASSERT_FALSE(out.empty());
    sched.commit(out);
    for (const ScheduledChunk& c : out.chunks) {
      if (c.logits != LogitsWanted::kNone) c.seq->tokens.push_back(7);
    }
  }
  FAIL() << "sequence " << id << " did not progress";
}

std::unique_ptr<Sequence> seq_with_tokens(uint64_t id, std::vector<int32_t> tokens, int gen) {
  auto s = make_seq(id, static_cast<int>(tokens.size()), gen);
  s->tokens = std::move(tokens);
  return s;
}

std::vector<int32_t> prefix_tokens(int n, int32_t base) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(base + i);
  return t;
}

// Runs a request with `tokens` as its prompt to its first token and removes it: its full blocks
// stay cached.
void leave_cached(Scheduler& sched, uint64_t id, std::vector<int32_t> tokens) {
  sched.add(seq_with_tokens(id, std::move(tokens), 1));
  run_until_generated(sched, id, 1);
  sched.remove(id);
}

TEST(SchedulerPrefixCache, SecondRequestAdoptsAllButTheBlockOfItsLastToken) {
  for (int len : {40, 47, 48, 49}) {
    SCOPED_TRACE(::testing::Message() << "prompt of " << len << " tokens");
    BlockAllocator blocks(16);
    Scheduler sched({8, 512, 16}, &blocks);
    sched.add(seq_with_tokens(1, prefix_tokens(len, 3), 1));
    run_until_generated(sched, 1, 1);
    sched.remove(1);
    EXPECT_EQ(blocks.num_cached(), len / 16);
    sched.add(seq_with_tokens(2, prefix_tokens(len, 3), 1));
    SchedulerOutput out = sched.schedule();
    ASSERT_EQ(out.chunks.size(), 1u);
    const int adopted = (len - 1) / 16 * 16;  // the last token is always computed
    EXPECT_EQ(out.chunks[0].seq->num_computed, adopted);
    EXPECT_EQ(out.chunks[0].num_tokens, len - adopted);
    EXPECT_EQ(out.chunks[0].seq->num_cached_prompt_tokens, adopted);
    EXPECT_EQ(sched.prefix_hit_tokens(), uint64_t(adopted));
    EXPECT_EQ(sched.prefix_queried_tokens(), uint64_t(2 * len));
    blocks.check_consistent();
  }
}

TEST(SchedulerPrefixCache, DifferentSaltOrTokenNeverHits) {
  BlockAllocator blocks(16);
  Scheduler sched({8, 512, 16}, &blocks);
  auto a = seq_with_tokens(1, prefix_tokens(40, 3), 1);
  a->cache_root = root_hash("tenant a");
  sched.add(std::move(a));
  run_until_generated(sched, 1, 1);
  sched.remove(1);
  auto b = seq_with_tokens(2, prefix_tokens(40, 3), 1);
  b->cache_root = root_hash("tenant b");
  sched.add(std::move(b));
  auto c = prefix_tokens(40, 3);
  c[0] = 999;  // the first block differs: nothing after it can match either
  sched.add(seq_with_tokens(3, c, 1));
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  for (const auto& ch : out.chunks) EXPECT_EQ(ch.seq->num_computed, 0) << ch.seq->id;
  EXPECT_EQ(sched.prefix_hit_tokens(), 0u);
}

TEST(SchedulerPrefixCache, PromptLogprobsComputeTheWholePrompt) {
  BlockAllocator blocks(16);
  Scheduler sched({8, 512, 16}, &blocks);
  leave_cached(sched, 1, prefix_tokens(40, 3));
  auto s = seq_with_tokens(2, prefix_tokens(40, 3), 1);
  s->need_prompt_logprobs = true;
  sched.add(std::move(s));
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].seq->num_computed, 0);
  EXPECT_EQ(out.chunks[0].num_tokens, 40);
  EXPECT_EQ(out.chunks[0].logits, LogitsWanted::kAll);
  EXPECT_EQ(sched.prefix_queried_tokens(), 40u) << "the logprobs request made no query";
}

TEST(SchedulerPrefixCache, AdmissionCountsCachedBlocksAsFreeExceptTheAdoptedOnes) {
  // 6 blocks. A 48-token prompt leaves its 3 full blocks cached. R runs (1 block, needs 1 more
  // for its next token). Free 2 + cached 3 = 5 available, less R's next block: 4.
  auto setup = [](BlockAllocator& blocks, Scheduler& sched) {
    sched.add(seq_with_tokens(1, prefix_tokens(48, 3), 1));
    run_until_generated(sched, 1, 1);
    sched.remove(1);
    sched.add(seq_with_tokens(2, prefix_tokens(16, 600), 40));
    run_until_generated(sched, 2, 1);
    ASSERT_EQ(blocks.num_cached(), 3);
    ASSERT_EQ(blocks.num_free(), 2);
  };
  // After the set-up, a prompt of the cached 48 tokens and `extra` new ones asks to be admitted.
  auto extend_cached = [&](BlockAllocator& blocks, Scheduler& sched, int extra) {
    setup(blocks, sched);
    auto t = prefix_tokens(48, 3);
    for (int i = 0; i < extra; ++i) t.push_back(900 + i);
    sched.add(seq_with_tokens(3, t, 1));
    return sched.schedule();
  };
  {
    // 68 tokens: adopts the 3 cached blocks (taking them from the available ones) and needs 2
    // new ones: 5 > 4, so it waits (admitting it would take the block R needs next).
    BlockAllocator blocks(6);
    Scheduler sched({8, 512, 16}, &blocks);
    extend_cached(blocks, sched, 20);
    EXPECT_EQ(sched.num_waiting(), 1);
    EXPECT_EQ(blocks.num_cached(), 3) << "nothing adopted by a request left waiting";
  }
  {
    // 52 tokens: 3 adopted + 1 new = 4 <= 4: admitted, computing only its last 4 tokens.
    BlockAllocator blocks(6);
    Scheduler sched({8, 512, 16}, &blocks);
    SchedulerOutput out = extend_cached(blocks, sched, 4);
    EXPECT_EQ(sched.num_waiting(), 0);
    ASSERT_EQ(out.chunks.size(), 2u);
    EXPECT_EQ(out.chunks[1].num_tokens, 4);
    EXPECT_EQ(blocks.num_cached(), 0);
    blocks.check_consistent();
  }
  {
    // An unrelated 40-token prompt (3 blocks) with no free block left but 3 cached: the cached
    // ones count as free capacity; it is admitted and evicts the least recently used.
    BlockAllocator blocks(5);
    Scheduler sched({8, 512, 16}, &blocks);
    sched.add(seq_with_tokens(1, prefix_tokens(48, 3), 1));
    run_until_generated(sched, 1, 1);
    sched.remove(1);
    sched.add(seq_with_tokens(2, prefix_tokens(8, 600), 8));  // one block, enough for 16 tokens
    run_until_generated(sched, 2, 1);
    sched.add(seq_with_tokens(3, prefix_tokens(40, 700), 1));
    ASSERT_EQ(blocks.num_free(), 1);
    SchedulerOutput out = sched.schedule();
    EXPECT_EQ(sched.num_waiting(), 0);
    EXPECT_EQ(blocks.num_evictions(), 2u);
    blocks.check_consistent();
  }
}

TEST(SchedulerPrefixCache, APrefixIsEvictedTailFirst) {
  BlockAllocator blocks(8);
  Scheduler sched({8, 512, 16}, &blocks);
  sched.add(seq_with_tokens(1, prefix_tokens(50, 3), 1));
  run_until_generated(sched, 1, 1);
  const std::vector<BlockId> table = sched.find(1)->block_table;
  sched.remove(1);
  // Released last block first: the LRU order is the prefix backwards (the partial 4th is free).
  EXPECT_EQ(blocks.cache().lru_order(), (std::vector<BlockId>{table[2], table[1], table[0]}));
}

TEST(SchedulerPrefixCache, GeneratedTokensBlocksAreCachedToo) {
  // A conversation's next turn resends the reply: the blocks decoding filled are reusable.
  BlockAllocator blocks(8);
  Scheduler sched({8, 512, 16}, &blocks);
  sched.add(seq_with_tokens(1, prefix_tokens(40, 3), 20));
  run_until_generated(sched, 1, 10);  // 50 tokens, 49 computed: 3 full blocks published
  Sequence* s = sched.find(1);
  ASSERT_EQ(s->num_computed, 49);
  const std::vector<int32_t> tokens = s->tokens;
  const std::vector<BlockId> table = s->block_table;
  sched.remove(1);
  EXPECT_EQ(blocks.num_cached(), 3);
  sched.add(seq_with_tokens(2, tokens, 10));
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].seq->num_computed, 48);
  EXPECT_EQ(out.chunks[0].num_tokens, 2);
  EXPECT_EQ(std::vector<BlockId>(out.chunks[0].seq->block_table.begin(),
                                 out.chunks[0].seq->block_table.begin() + 3),
            std::vector<BlockId>(table.begin(), table.begin() + 3));
}

TEST(SchedulerSim, AmpleCacheNoPreemption) {
  SimResult r = simulate({16, 64, 16}, 400, 60, 1, 120, 40);
  EXPECT_EQ(r.preemptions, 0u);
}

TEST(SchedulerSim, TinyCachePreemptsAndStillMatchesSolo) {
  SimResult r = simulate({16, 64, 16}, 12, 60, 2, 100, 60);
  EXPECT_GT(r.preemptions, 0u);
}

TEST(SchedulerSim, SharedPrefixesHitTheCacheAndStillMatchSolo) {
  for (bool caching : {true, false}) {
    SchedulerConfig cfg{16, 64, 16, caching};
    SimResult ample = simulate(cfg, 400, 60, 3, 120, 40, /*shared_prefix=*/70);
    SimResult tiny = simulate(cfg, 14, 60, 4, 100, 60, /*shared_prefix=*/50);
    EXPECT_GT(tiny.preemptions, 0u);
    if (caching) {
      EXPECT_GT(ample.prefix_hit_tokens, 60u * 16) << "most of 60 requests should adopt 4 blocks";
      EXPECT_GT(tiny.prefix_hit_tokens, 0u);
    } else {
      EXPECT_EQ(ample.prefix_hit_tokens + tiny.prefix_hit_tokens, 0u);
    }
  }
}

// Runs one step and appends token 7 to every sequence that got a logits row; returns the output.
SchedulerOutput step_and_sample(Scheduler& sched) {
  SchedulerOutput out = sched.schedule();
  sched.commit(out);
  for (const ScheduledChunk& c : out.chunks)
    if (c.logits != LogitsWanted::kNone) c.seq->tokens.push_back(7);
  return out;
}

int tokens_of(const SchedulerOutput& out, uint64_t id) {
  for (const ScheduledChunk& c : out.chunks)
    if (c.seq->id == id) return c.num_tokens;
  return 0;
}

TEST(SchedulerShortLane, ACachedConversationGoesAheadOfALongPrompt) {
  // 1 leaves a 64-token conversation cached. Then 2 (a long new prompt) and 3 (the conversation
  // plus 8 new tokens) arrive in that order: 3 adopts the 4 cached blocks, needs 8 tokens of
  // prefill and runs at once, ahead of 2.
  BlockAllocator blocks(64);
  Scheduler sched({8, 128, 16}, &blocks);
  leave_cached(sched, 1, prefix_tokens(64, 3));
  sched.add(seq_with_tokens(2, prefix_tokens(400, 2000), 4));
  auto turn = prefix_tokens(64, 3);
  for (int i = 0; i < 8; ++i) turn.push_back(900 + i);
  sched.add(seq_with_tokens(3, turn, 4));
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].seq->id, 3u) << "the short one is scheduled first";
  EXPECT_EQ(out.chunks[0].num_tokens, 8);
  EXPECT_EQ(out.chunks[0].logits, LogitsWanted::kLast);
  EXPECT_EQ(out.chunks[1].seq->id, 2u);
  EXPECT_EQ(out.chunks[1].num_tokens, 128 - 8) << "the long prompt takes the rest";
  // Both run, in arrival order.
  ASSERT_EQ(sched.running().size(), 2u);
  EXPECT_EQ(sched.running()[0]->id, 2u);
  EXPECT_EQ(sched.running()[1]->id, 3u);
  EXPECT_EQ(sched.running()[0]->num_bypassed, 1) << "2 was passed over once";
}

TEST(SchedulerShortLane, OffMeansArrivalOrder) {
  BlockAllocator blocks(64);
  SchedulerConfig cfg{8, 128, 16};
  cfg.short_prefill_tokens = 0;
  Scheduler sched(cfg, &blocks);
  sched.add(seq_with_tokens(1, prefix_tokens(400, 2000), 4));
  sched.add(seq_with_tokens(2, prefix_tokens(8, 3), 4));
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].seq->id, 1u);
  EXPECT_EQ(out.chunks[0].num_tokens, 128);
}

TEST(SchedulerShortLane, ALongPromptIsPassedOverAtMostMaxBypassSteps) {
  // Four new 16-token requests arrive every step, enough to fill the 64-token budget on their
  // own. The 200-token prompt that came first would never get a token if shorts always went
  // first; after max_bypass steps without progress the short lane closes until its prompt is
  // done.
  for (int max_bypass : {0, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << "max_bypass " << max_bypass);
    BlockAllocator blocks(4096);
    SchedulerConfig cfg{256, 64, 16};
    cfg.max_bypass = max_bypass;
    Scheduler sched(cfg, &blocks);
    uint64_t id = 1;
    sched.add(seq_with_tokens(id++, prefix_tokens(200, 5000), 1));
    int starved_steps = 0, steps = 0;
    for (; steps < 200; ++steps) {
      for (int i = 0; i < 4; ++i) sched.add(seq_with_tokens(id, prefix_tokens(16, int32_t(id * 20)), 1)), ++id;
      Sequence* long_one = sched.find(1);
      if (long_one == nullptr || long_one->num_generated() > 0) break;
      SchedulerOutput out = step_and_sample(sched);
      if (tokens_of(out, 1) == 0) ++starved_steps;
      for (const auto& s : sched.running()) ASSERT_LE(s->num_bypassed, max_bypass);
      for (const auto& s : sched.waiting()) ASSERT_LE(s->num_bypassed, max_bypass);
      std::vector<uint64_t> done;
      for (const auto& s : sched.running())
        if (s->num_generated() > 0 && s->id != 1) done.push_back(s->id);
      for (uint64_t d : done) sched.remove(d);
    }
    EXPECT_EQ(starved_steps, max_bypass) << "passed over exactly max_bypass times";
    EXPECT_LE(steps, max_bypass + 4 + 1) << "then 200 tokens at 64 per step";
  }
}

TEST(SchedulerShortLane, ARequestWaitsForThePrefixAnotherIsComputing) {
  // Two requests with one 64-token system prompt arrive together, nothing cached. The second
  // does not compute the prompt again beside the first: it waits one step and adopts it.
  BlockAllocator blocks(64);
  Scheduler sched({8, 512, 16}, &blocks);
  auto a = prefix_tokens(64, 3), b = prefix_tokens(64, 3);
  for (int i = 0; i < 8; ++i) a.push_back(100 + i), b.push_back(200 + i);
  sched.add(seq_with_tokens(1, a, 4));
  sched.add(seq_with_tokens(2, b, 4));
  SchedulerOutput first = step_and_sample(sched);
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_EQ(first.chunks[0].seq->id, 1u);
  EXPECT_EQ(sched.num_waiting(), 1);
  SchedulerOutput second = step_and_sample(sched);
  ASSERT_EQ(second.chunks.size(), 2u);
  EXPECT_EQ(tokens_of(second, 1), 1) << "1 decodes";
  EXPECT_EQ(tokens_of(second, 2), 8) << "2 adopted the 4 prompt blocks";
  EXPECT_EQ(sched.find(2)->num_cached_prompt_tokens, 64);
  // Without caching there is nothing to wait for: both prefill at once.
  BlockAllocator blocks2(64);
  Scheduler plain({8, 512, 16, /*enable_prefix_caching=*/false}, &blocks2);
  plain.add(seq_with_tokens(1, a, 4));
  plain.add(seq_with_tokens(2, b, 4));
  EXPECT_EQ(plain.schedule().chunks.size(), 2u);
}

TEST(SchedulerShortLane, PromptLogprobRequestsDoNotWaitForInflightBlocks) {
  BlockAllocator blocks(64);
  Scheduler sched({8, 512, 16}, &blocks);
  sched.add(seq_with_tokens(1, prefix_tokens(72, 3), 4));
  auto s = seq_with_tokens(2, prefix_tokens(72, 3), 4);
  s->need_prompt_logprobs = true;  // computes its whole prompt anyway
  sched.add(std::move(s));
  EXPECT_EQ(sched.schedule().chunks.size(), 2u);
}

TEST(SchedulerSim, RandomConfigs) {
  std::mt19937 rng(99);
  uint64_t total_preemptions = 0;
  for (int trial = 0; trial < 200; ++trial) {
    SchedulerConfig cfg;
    cfg.enable_prefix_caching = trial % 3 != 0;
    cfg.block_size = 1 + rng() % 32;
    cfg.max_num_seqs = 1 + rng() % 12;
    cfg.max_num_batched_tokens = 1 + rng() % 100;
    cfg.short_prefill_tokens = trial % 4 == 0 ? 0 : static_cast<int>(rng() % 50);
    cfg.max_bypass = static_cast<int>(rng() % 6);
    int num_blocks = 2 + rng() % 40;
    SCOPED_TRACE(::testing::Message() << "trial " << trial << " bs " << cfg.block_size << " seqs "
                                      << cfg.max_num_seqs << " budget "
                                      << cfg.max_num_batched_tokens << " blocks " << num_blocks
                                      << " short " << cfg.short_prefill_tokens << " bypass "
                                      << cfg.max_bypass);
    SimResult r = simulate(cfg, num_blocks, 40, 1000 + trial, 80, 40, trial % 2 ? 40 : 0);
    total_preemptions += r.preemptions;
    if (HasFailure()) break;
  }
  EXPECT_GT(total_preemptions, 0u);
}

}  // namespace
}  // namespace flashserve
