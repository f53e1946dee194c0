// Sliding-window KV memory in the scheduler: the window arithmetic, blocks released as the window
// slides in decode and in chunked prefill, admission and fits_in_cache() counting window blocks
// only, the prefix cache (publish, release, adopt only the window's blocks), preemption, and a
// randomized simulation against a fake model that reads only the window's tokens through the
// block table, so a block released too early or a wrongly adopted one changes the output.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "model/step.h"
#include "scheduling/kv_window.h"
#include "scheduling/scheduler.h"

namespace flashserve {
namespace {

constexpr int kVocab = 1000;

// Next token of the fake model: a hash of the last `window` tokens (the window of the position).
int32_t next_token(const std::vector<int32_t>& all, int window) {
  uint64_t h = 1469598103934665603ull;
  const size_t first = all.size() > size_t(window) ? all.size() - size_t(window) : 0;
  for (size_t i = first; i < all.size(); ++i) h = (h ^ uint64_t(all[i] + 7)) * 1099511628211ull;
  return int32_t(h % kVocab);
}

std::vector<int32_t> solo_output(std::vector<int32_t> all, int gen, int window) {
  const size_t prompt = all.size();
  for (int i = 0; i < gen; ++i) all.push_back(next_token(all, window));
  return {all.begin() + ptrdiff_t(prompt), all.end()};
}

// Runs steps against a token-id "KV cache" and reads back only each position's window.
class WindowModel {
 public:
  WindowModel(int num_blocks, int bs, int window)
      : bs_(bs), window_(window), kv_(size_t(num_blocks) * bs, -1) {}

  // One sampled token per chunk that asks for logits, in chunk order.
  std::vector<int32_t> step(const StepPlan& plan) {
    std::vector<int32_t> rows;
    for (const StepChunk& c : plan.chunks) {
      const auto& table = *c.block_table;
      for (int i = 0; i < c.num_tokens; ++i) kv_[slot(table, c.num_cached + i)] = c.tokens[i];
      if (c.logits != LogitsWanted::kLast) continue;
      const int last = c.num_cached + c.num_tokens - 1;
      std::vector<int32_t> seen;
      for (int p = std::max(0, last - window_ + 1); p <= last; ++p) seen.push_back(kv_[slot(table, p)]);
      rows.push_back(next_token(seen, window_));
    }
    return rows;
  }

 private:
  size_t slot(const std::vector<BlockId>& table, int pos) const {
    return size_t(table[size_t(pos / bs_)]) * bs_ + pos % bs_;
  }
  int bs_, window_;
  std::vector<int32_t> kv_;
};

std::unique_ptr<Sequence> make_seq(uint64_t id, std::vector<int32_t> tokens, int gen) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->num_prompt_tokens = int(tokens.size());
  s->tokens = std::move(tokens);
  s->max_tokens = gen;
  return s;
}

std::vector<int32_t> tokens_from(int n, int32_t base) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((base + i * 13) % kVocab);
  return t;
}

int held(const Sequence& s) { return int(s.block_table.size()) - s.num_dropped_blocks; }

// The invariants of every step under a window: dropped entries are the sentinel and exactly the
// blocks behind the window, reference counts match the holders, nothing is leaked, a sequence
// holds no more than its window and its chunk span.
void check_window_step(const Scheduler& sched, const BlockAllocator& blocks,
                       const SchedulerOutput& out) {
  const int bs = sched.config().block_size, window = sched.config().kv_window;
  std::map<BlockId, int> holders;
  for (const auto& s : sched.running()) {
    const int behind = std::min(blocks_before_window(s->num_computed, window, bs),
                                int(s->block_table.size()));
    ASSERT_EQ(s->num_dropped_blocks, behind) << "sequence " << s->id;
    for (int i = 0; i < s->num_dropped_blocks; ++i) ASSERT_EQ(s->block_table[size_t(i)], kDroppedBlock);
    int chunk = 1;
    for (const ScheduledChunk& c : out.chunks)
      if (c.seq == s.get()) chunk = c.num_tokens;
    ASSERT_LE(held(*s), window_blocks(window - 1 + chunk, bs)) << "sequence " << s->id;
    for (size_t i = size_t(s->num_dropped_blocks); i < s->block_table.size(); ++i)
      ++holders[s->block_table[i]];
  }
  for (const auto& [b, n] : holders) ASSERT_EQ(blocks.ref_count(b), n) << "block " << b;
  ASSERT_EQ(int(holders.size()), blocks.num_used()) << "leaked or double-counted blocks";
  blocks.check_consistent();
  for (const auto& s : sched.waiting()) {
    ASSERT_TRUE(s->block_table.empty());
    ASSERT_EQ(s->num_dropped_blocks, 0);
  }
}

// Runs the scheduler and the model until nothing is left; returns each sequence's output.
std::map<uint64_t, std::vector<int32_t>> run_all(Scheduler& sched, BlockAllocator& blocks,
                                                 WindowModel& model) {
  std::map<uint64_t, std::vector<int32_t>> outputs;
  for (int step = 0; sched.has_work(); ++step) {
    if (step > 100000) {
      ADD_FAILURE() << "no end";
      break;
    }
    SchedulerOutput out = sched.schedule();
    check_window_step(sched, blocks, out);
    if (::testing::Test::HasFatalFailure()) break;
    EXPECT_FALSE(out.empty());
    if (out.empty()) break;
    StepPlan plan = out.to_step_plan();
    // The step plan's bounds check accepts the sentinel entries.
    plan.lay_out(sched.config().block_size, blocks.num_total(), kVocab);
    const std::vector<int32_t> rows = model.step(plan);
    sched.commit(out);
    check_window_step(sched, blocks, SchedulerOutput{});
    size_t r = 0;
    std::vector<uint64_t> done;
    for (const ScheduledChunk& c : out.chunks) {
      if (c.logits != LogitsWanted::kLast) continue;
      c.seq->tokens.push_back(rows[r++]);
      if (c.seq->num_generated() >= c.seq->max_tokens) done.push_back(c.seq->id);
    }
    for (uint64_t id : done) {
      const Sequence* s = sched.find(id);
      outputs[id] = {s->tokens.begin() + s->num_prompt_tokens, s->tokens.end()};
      sched.remove(id);
    }
  }
  return outputs;
}

TEST(KvWindow, SharedWindowIsTheWidestWhenEveryLayerHasOne) {
  EXPECT_EQ(shared_kv_window(std::vector<int>{}), 0);
  EXPECT_EQ(shared_kv_window(std::vector<int>{4096, 4096}), 4096);
  EXPECT_EQ(shared_kv_window(std::vector<int>{8, 16, 8}), 16);
  EXPECT_EQ(shared_kv_window(std::vector<int>{512, 512, 0}), 0) << "a global layer keeps all";
}

TEST(KvWindow, BlocksBehindAndWindowSpanMatchBruteForce) {
  for (int bs : {1, 2, 4, 16}) {
    for (int window = 1; window <= 40; ++window) {
      int widest = 0;
      for (int pos = 0; pos < 200; ++pos) {
        const int first_key = std::max(0, pos - window + 1);
        int behind = 0;  // blocks whose last position is before the first key
        while ((behind + 1) * bs - 1 < first_key) ++behind;
        ASSERT_EQ(blocks_before_window(pos, window, bs), behind) << bs << " " << window << " " << pos;
        widest = std::max(widest, pos / bs - first_key / bs + 1);
      }
      ASSERT_EQ(window_blocks(window, bs), widest) << "bs " << bs << ", window " << window;
      ASSERT_LE(window_blocks(window, bs), window / bs + 2);
    }
  }
  EXPECT_EQ(blocks_before_window(100000, 0, 16), 0) << "window 0: full attention";
}

TEST(SchedulerWindow, DecodeReleasesBlocksAsTheWindowSlides) {
  BlockAllocator blocks(64);
  Scheduler sched({.block_size = 4, .enable_prefix_caching = false, .kv_window = 8}, &blocks);
  WindowModel model(64, 4, 8);
  const auto prompt = tokens_from(6, 1);
  sched.add(make_seq(1, prompt, 60));
  bool reused_block0 = false;  // block 0 both released (sentinel) and held again for real
  for (int step = 0; step < 200 && sched.find(1); ++step) {
    SchedulerOutput out = sched.schedule();
    const std::vector<int32_t> rows = model.step(out.to_step_plan());
    sched.commit(out);
    Sequence* s = sched.find(1);
    check_window_step(sched, blocks, SchedulerOutput{});
    EXPECT_EQ(blocks.num_used(), held(*s));
    EXPECT_LE(held(*s), 3) << "8 positions over 4-token blocks";
    const auto tail = s->block_table.begin() + s->num_dropped_blocks;
    reused_block0 |= s->num_dropped_blocks > 0 && std::find(tail, s->block_table.end(), 0) != s->block_table.end();
    s->tokens.push_back(rows.at(0));
    if (s->num_generated() == 60) {
      EXPECT_EQ(std::vector<int32_t>(s->tokens.begin() + 6, s->tokens.end()), solo_output(prompt, 60, 8));
      EXPECT_GT(s->num_dropped_blocks, 10);
      EXPECT_TRUE(sched.remove(1));
    }
  }
  EXPECT_TRUE(reused_block0) << "the test meant to hold block 0 beside its sentinel";
  EXPECT_EQ(sched.find(1), nullptr);
  EXPECT_EQ(blocks.num_free(), 64);
  blocks.check_consistent();
}

TEST(SchedulerWindow, ChunkedPrefillReleasesBlocksBetweenChunks) {
  // 5 blocks of 4 hold a chunk of 8 beside a window of 8; the whole 50 tokens need 13.
  BlockAllocator blocks(5);
  Scheduler sched({.max_num_batched_tokens = 8, .block_size = 4, .kv_window = 8}, &blocks);
  EXPECT_TRUE(sched.fits_in_cache(100000));
  Scheduler full_attention({.max_num_batched_tokens = 8, .block_size = 4}, &blocks);
  EXPECT_FALSE(full_attention.fits_in_cache(50));
  WindowModel model(5, 4, 8);
  const auto prompt = tokens_from(40, 3);
  sched.add(make_seq(1, prompt, 10));
  auto outputs = run_all(sched, blocks, model);
  EXPECT_EQ(outputs[1], solo_output(prompt, 10, 8));
  EXPECT_EQ(sched.num_preemptions(), 0u);
}

TEST(SchedulerWindow, AdmissionCountsOnlyTheWindowsBlocks) {
  // Two sequences of 204 tokens each in 6 blocks: each holds at most 3 (window 8, blocks of 4),
  // so both run side by side from the first step and neither is ever preempted.
  BlockAllocator blocks(6);
  Scheduler sched({.block_size = 4, .kv_window = 8}, &blocks);
  WindowModel model(6, 4, 8);
  const auto a = tokens_from(4, 5), b = tokens_from(4, 9);
  sched.add(make_seq(1, a, 200));
  sched.add(make_seq(2, b, 200));
  SchedulerOutput first = sched.schedule();
  EXPECT_EQ(first.chunks.size(), 2u);
  const auto rows = model.step(first.to_step_plan());
  sched.commit(first);
  for (size_t i = 0; i < first.chunks.size(); ++i) first.chunks[i].seq->tokens.push_back(rows[i]);
  auto outputs = run_all(sched, blocks, model);
  EXPECT_EQ(outputs[1], solo_output(a, 200, 8));
  EXPECT_EQ(outputs[2], solo_output(b, 200, 8));
  EXPECT_EQ(sched.num_preemptions(), 0u);
}

TEST(SchedulerWindow, PreemptedSequencesResumeFromZero) {
  // Three sequences admitted for their next tokens outgrow 6 blocks once their windows fill:
  // the newest is preempted, recomputes from position 0 when resumed, and all match solo.
  BlockAllocator blocks(6);
  Scheduler sched({.block_size = 4, .enable_prefix_caching = false, .kv_window = 8}, &blocks);
  WindowModel model(6, 4, 8);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (uint64_t id : {1, 2, 3}) {
    prompts[id] = tokens_from(4, int32_t(id) * 50);
    sched.add(make_seq(id, prompts[id], 40));
  }
  auto outputs = run_all(sched, blocks, model);
  EXPECT_GT(sched.num_preemptions(), 0u);
  for (uint64_t id : {1, 2, 3}) EXPECT_EQ(outputs[id], solo_output(prompts[id], 40, 8)) << id;
  EXPECT_EQ(blocks.num_free(), 6);
}

// Runs a 32-token prompt to its first token and removes it: its published blocks stay cached,
// those behind the window (released while it ran) first in the LRU order.
void leave_cached(Scheduler& sched, BlockAllocator& blocks, WindowModel& model,
                  const std::vector<int32_t>& prompt) {
  sched.add(make_seq(1, prompt, 1));
  SchedulerOutput out = sched.schedule();
  model.step(out.to_step_plan());
  sched.commit(out);
  const Sequence* s = sched.find(1);
  ASSERT_EQ(s->num_dropped_blocks, 6) << "positions 0..23 lie behind the window of 32";
  EXPECT_EQ(blocks.num_cached(), 6) << "released published blocks stay adoptable";
  sched.remove(1);
  EXPECT_EQ(blocks.num_cached(), 8);
}

TEST(SchedulerWindow, AdoptsOnlyTheCachedBlocksItsWindowReads) {
  for (int evicted : {0, 6, 7}) {
    SCOPED_TRACE(::testing::Message() << evicted << " cached blocks evicted");
    BlockAllocator blocks(12);
    Scheduler sched({.block_size = 4, .kv_window = 8}, &blocks);
    WindowModel model(12, 4, 8);
    const auto prompt = tokens_from(32, 7);
    leave_cached(sched, blocks, model, prompt);
    // LRU order: blocks 0..5 (released behind the window), then 7 and 6 (released last first).
    std::vector<BlockId> taken;
    while (blocks.num_evictions() < uint64_t(evicted)) taken.push_back(*blocks.allocate());
    for (BlockId b : taken) blocks.release(b);
    auto longer = prompt;
    for (int32_t t : tokens_from(8, 100)) longer.push_back(t);
    sched.add(make_seq(2, longer, 5));
    SchedulerOutput out = sched.schedule();
    const Sequence* s = sched.find(2);
    if (evicted == 7) {  // block 7 is gone, and block 6 alone covers no window: nothing adopted
      EXPECT_EQ(out.chunks.at(0).num_tokens, 40);
      EXPECT_EQ(s->num_dropped_blocks, 0);
    } else {  // blocks 6 and 7 hold positions 24..31, the window of position 32
      EXPECT_EQ(out.chunks.at(0).num_tokens, 8);
      EXPECT_EQ(s->num_dropped_blocks, 6);
      EXPECT_EQ(sched.prefix_hit_tokens(), 32u);
    }
    check_window_step(sched, blocks, out);
    const auto rows = model.step(out.to_step_plan());
    sched.commit(out);
    sched.find(2)->tokens.push_back(rows.at(0));
    auto outputs = run_all(sched, blocks, model);
    EXPECT_EQ(outputs[2], solo_output(longer, 5, 8));
  }
}

// Random arrivals with shared prefixes, prefix caching on and off, caches from ample to tiny
// (preempting): every output matches the sequence run alone.
TEST(SchedulerWindow, RandomSimulationsMatchSolo) {
  uint64_t preemptions = 0, hits = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const int bs = 1 + int(rng() % 8), window = 1 + int(rng() % 40);
    const int num_blocks = window_blocks(window, bs) + int(rng() % 3 == 0 ? 1 : rng() % 40);
    BlockAllocator blocks(num_blocks);
    SchedulerConfig cfg{.max_num_seqs = 1 + int(rng() % 8),
                        .max_num_batched_tokens = 1 + int(rng() % 64),
                        .block_size = bs,
                        .enable_prefix_caching = seed % 2 == 0,
                        .short_prefill_tokens = int(rng() % 2) * 16,
                        .kv_window = window};
    SCOPED_TRACE(::testing::Message() << "seed " << seed << ", bs " << bs << ", window "
                                      << window << ", blocks " << num_blocks);
    Scheduler sched(cfg, &blocks);
    WindowModel model(num_blocks, bs, window);
    std::map<uint64_t, std::pair<std::vector<int32_t>, int>> inputs;
    for (uint64_t id = 1; id <= 24; ++id) {
      auto prompt = tokens_from(1 + int(rng() % 20), int32_t(rng() % 3) * 100);  // 3 prefixes
      for (int32_t t : tokens_from(int(rng() % 60), int32_t(rng() % kVocab))) prompt.push_back(t);
      const int gen = 1 + int(rng() % 80);
      ASSERT_TRUE(sched.fits_in_cache(int(prompt.size()) + gen));
      inputs[id] = {prompt, gen};
      sched.add(make_seq(id, prompt, gen));
    }
    auto outputs = run_all(sched, blocks, model);
    for (const auto& [id, in] : inputs)
      EXPECT_EQ(outputs[id], solo_output(in.first, in.second, window)) << "request " << id;
    EXPECT_EQ(blocks.num_used(), 0);
    preemptions += sched.num_preemptions();
    hits += sched.prefix_hit_tokens();
  }
  EXPECT_GT(preemptions, 0u) << "some seed should run out of blocks";
  EXPECT_GT(hits, 0u) << "some seed should adopt cached blocks";
}

}  // namespace
}  // namespace flashserve
