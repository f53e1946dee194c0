// scheduling/: decides which tokens of which sequences run in each step and which KV blocks
// hold them (scheduler, sequences, block allocator; the prefix cache belongs here).
//
// Scheduler: continuous-batching policy, no threads and no device memory. Each step it picks
// decodes first (one token per running sequence), then fills what is left of the token budget
// with prefill chunks — running prefills first, then new admissions in arrival (FIFO) order,
// each only when its whole prompt fits beside what the running sequences need next.
// When the KV cache runs out it recompute-preempts the newest running sequence (LIFO): its
// blocks are freed and it goes back to the front of the waiting queue with its generated tokens,
// to be run again from position 0 when resumed.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "scheduling/block_allocator.h"
#include "scheduling/sequence.h"
#include "model/step.h"

namespace flashserve {

struct SchedulerConfig {
  int max_num_seqs = 64;             // running sequences at once
  int max_num_batched_tokens = 512;  // tokens per step (decodes + prefill chunks)
  int block_size = 16;               // tokens per KV block
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int num_tokens = 0;  // tokens seq->tokens[num_computed .. num_computed + num_tokens - 1]
  LogitsWanted logits = LogitsWanted::kNone;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // running order (oldest first within each phase)
  std::vector<uint64_t> preempted;     // ids preempted this step, in preemption order

  bool empty() const { return chunks.empty(); }
  int num_batched_tokens() const;
  // The model's view; points into the sequences, valid until they change (commit/finish/abort).
  // The first form refills `plan`'s chunks and keeps its arrays' capacity (the engine's, reused
  // step after step).
  void to_step_plan(StepPlan* plan) const;
  StepPlan to_step_plan() const;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockAllocator* blocks);
  ~Scheduler();

  // Queues a sequence at the back of the waiting queue. Its id must exceed every id added
  // before (arrival order), and its prompt + max_tokens must fit the whole cache (the caller
  // checks with fits_in_cache()).
  void add(std::unique_ptr<Sequence> seq);
  bool fits_in_cache(int total_tokens) const;

  SchedulerOutput schedule();
  // Records that `out`'s chunks ran: their tokens now have K/V in the cache. Call after the
  // model step succeeded and before appending sampled tokens.
  void commit(const SchedulerOutput& out);
  // Removes a sequence (finished, cancelled or failed) wherever it is and frees its blocks.
  // Returns false for an unknown id.
  bool remove(uint64_t id);

  Sequence* find(uint64_t id);
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  uint64_t num_preemptions() const { return num_preemptions_; }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  // Grows seq's block table to cover num_computed + num_tokens positions; false (and no change)
  // when not enough blocks are free.
  bool reserve(Sequence* seq, int num_tokens);
  // How many of seq's next `want` tokens fit in its blocks plus the free ones.
  int fit(const Sequence* seq, int want) const;
  // Blocks seq still lacks to hold all its tokens plus the next one it generates.
  int blocks_to_next_token(const Sequence* seq) const;
  // Preempts running_.back(), dropping its chunk from `out` if it was already scheduled.
  void preempt_newest(SchedulerOutput* out, int* budget);
  void free_blocks(Sequence* seq);
  LogitsWanted logits_for(const Sequence* seq, int num_tokens) const;

  SchedulerConfig config_;
  BlockAllocator* blocks_;
  // Both sorted by id: every running id is smaller than every waiting id, because admission
  // takes the oldest waiting and preemption returns the newest running to the front.
  std::vector<std::unique_ptr<Sequence>> running_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  uint64_t last_added_id_ = 0;
  bool any_added_ = false;
  uint64_t num_preemptions_ = 0;
};

}  // namespace flashserve
