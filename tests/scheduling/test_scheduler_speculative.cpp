// The scheduler's side of speculative decoding: a decode chunk grows by its sequence's draft
// (every row's logits wanted), only into blocks nobody else needs and never by preempting;
// accept_draft keeps the accepted tokens' K/V, gives the rejected slots' blocks back, and
// publishes to the prefix cache only blocks made wholly of accepted tokens.
#include <gtest/gtest.h>

#include "core/error.h"
#include "scheduling/scheduler.h"

namespace flashserve {
namespace {

constexpr int kBlock = 4;

std::unique_ptr<Sequence> seq(uint64_t id, int prompt_len, int max_tokens = 100) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  for (int i = 0; i < prompt_len; ++i) s->tokens.push_back(10 + int32_t(id) * 100 + i);
  s->num_prompt_tokens = prompt_len;
  s->max_tokens = max_tokens;
  return s;
}

// Runs the prefill of every waiting sequence and appends one sampled token to each.
void prefill(Scheduler& sched) {
  SchedulerOutput out = sched.schedule();
  sched.commit(out);
  for (const ScheduledChunk& c : out.chunks) c.seq->tokens.push_back(1);
}

TEST(SchedulerSpeculative, DraftLengthensTheDecodeAndRejectedSlotsGoBack) {
  BlockAllocator blocks(16);
  Scheduler sched({.block_size = kBlock}, &blocks);
  sched.add(seq(1, 6));
  prefill(sched);
  Sequence* s = sched.find(1);
  ASSERT_EQ(s->num_computed, 6);
  ASSERT_EQ(s->num_tokens(), 7);
  EXPECT_EQ(blocks.num_used(), 2);
  s->draft = {50, 51, 52, 53, 54};  // positions 7..11: two blocks more than the decode needs
  SchedulerOutput out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].num_tokens, 6);
  EXPECT_EQ(out.chunks[0].num_draft, 5);
  EXPECT_EQ(out.chunks[0].logits, LogitsWanted::kAll);
  EXPECT_EQ(s->block_table.size(), 3u);  // positions 0..11
  const StepPlan plan = out.to_step_plan();
  ASSERT_EQ(plan.chunks[0].num_tokens, 6);
  EXPECT_EQ(std::vector<int32_t>(plan.chunks[0].tokens, plan.chunks[0].tokens + 6),
            (std::vector<int32_t>{1, 50, 51, 52, 53, 54}));
  EXPECT_EQ(plan.chunks[0].num_cached, 6);
  sched.commit(out);
  EXPECT_EQ(s->num_computed, 7);  // the pending token only, until the draft is judged
  // The target agreed with 50, then drew 60 instead of 51.
  s->tokens.push_back(50);
  s->tokens.push_back(60);
  sched.accept_draft(s, 1);
  EXPECT_EQ(s->num_computed, 8);
  EXPECT_EQ(s->num_tokens(), 9);
  EXPECT_TRUE(s->draft.empty());
  EXPECT_EQ(s->block_table.size(), 3u);  // 9 tokens: three blocks, none rejected wholly
  s->draft = {61, 62, 63, 64, 65, 66, 67};
  out = sched.schedule();
  EXPECT_EQ(out.chunks[0].num_draft, 7);
  EXPECT_EQ(s->block_table.size(), 4u);  // positions 0..15
  sched.commit(out);
  s->tokens.push_back(70);  // nothing accepted
  sched.accept_draft(s, 0);
  EXPECT_EQ(s->num_computed, 9);
  EXPECT_EQ(s->block_table.size(), 3u);  // the blocks of rejected slots only went back
  EXPECT_EQ(blocks.num_used(), 3);
  EXPECT_THROW(sched.accept_draft(s, 2), Error);  // more than the tokens hold
}

TEST(SchedulerSpeculative, OnlyAcceptedBlocksAreCached) {
  BlockAllocator blocks(16);
  Scheduler sched({.block_size = kBlock}, &blocks);
  sched.add(seq(1, 3));
  prefill(sched);  // tokens 0..3, 3 computed
  Sequence* s = sched.find(1);
  s->draft = {40, 41, 42, 43, 44, 45};  // would fill blocks 1 and most of 2
  SchedulerOutput out = sched.schedule();
  sched.commit(out);
  // Block 0 (positions 0..3) is full of real tokens once the pending token ran.
  EXPECT_EQ(s->num_published_blocks, 1);
  s->tokens.push_back(40);
  s->tokens.push_back(41);
  s->tokens.push_back(99);  // 40, 41 accepted; 99 drawn
  sched.accept_draft(s, 2);
  // Positions 4..5 are accepted, 6 pending: block 1 is not full, nothing more is published.
  EXPECT_EQ(s->num_computed, 6);
  EXPECT_EQ(s->num_published_blocks, 1);
  // A newcomer with the drafted (rejected) continuation finds only block 0 cached.
  sched.remove(1);
  auto twin = seq(1, 3);
  twin->id = 2;
  twin->tokens.push_back(1);
  for (int32_t t : {40, 41, 42, 43, 44}) twin->tokens.push_back(t);
  twin->num_prompt_tokens = twin->num_tokens();
  sched.add(std::move(twin));
  out = sched.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].seq->num_computed, kBlock);  // adopted block 0 only
}

TEST(SchedulerSpeculative, DraftsNeverPreempt) {
  // 4 blocks: two sequences of 7 tokens hold 2 each after their decodes; no block is spare.
  BlockAllocator blocks(4);
  Scheduler sched({.block_size = kBlock, .enable_prefix_caching = false}, &blocks);
  sched.add(seq(1, 6));
  sched.add(seq(2, 6));
  prefill(sched);
  for (uint64_t id : {1u, 2u}) sched.find(id)->draft = {7, 8, 9};
  SchedulerOutput out = sched.schedule();
  EXPECT_TRUE(out.preempted.empty());
  ASSERT_EQ(out.chunks.size(), 2u);
  for (const ScheduledChunk& c : out.chunks) {
    EXPECT_EQ(c.num_draft, 1) << c.seq->id;  // position 7 fits the block the decode holds
    EXPECT_EQ(c.num_tokens, 2);
  }
  EXPECT_EQ(sched.num_preemptions(), 0u);
}

TEST(SchedulerSpeculative, DraftsLeaveRoomForRunningPrefills) {
  // Sequence 2's prompt is mid-prefill: its remaining blocks are not lent to 1's draft.
  BlockAllocator blocks(6);
  Scheduler sched({.max_num_batched_tokens = 8, .block_size = kBlock,
                   .enable_prefix_caching = false},
                  &blocks);
  sched.add(seq(1, 3));
  prefill(sched);  // 1: 4 tokens, 1 block
  sched.add(seq(2, 12));
  SchedulerOutput out = sched.schedule();  // 1 decodes, 2 prefills 7 of its 12
  sched.commit(out);
  for (const ScheduledChunk& c : out.chunks)
    if (c.seq->id == 1) c.seq->tokens.push_back(1);
  Sequence* s1 = sched.find(1);
  s1->draft = {5, 6, 7, 8, 9, 10, 11, 12};
  out = sched.schedule();
  EXPECT_TRUE(out.preempted.empty());
  int drafted = -1;
  for (const ScheduledChunk& c : out.chunks)
    if (c.seq->id == 1) drafted = c.num_draft;
  // 6 blocks: 2 for sequence 1 (5 tokens + the next), 4 for sequence 2 (12 tokens + 1): none
  // spare, so the draft fills only sequence 1's own last block (positions 5..7).
  EXPECT_EQ(drafted, 3);
}

}  // namespace
}  // namespace flashserve
