// scheduling/: decides which tokens of which sequences run in each step and which KV blocks
// hold them (scheduler, sequences, block allocator; the prefix cache belongs here).
//
// Scheduler: continuous-batching policy, no threads and no device memory. Each step it picks
// decodes first (one token per running sequence), then fills what is left of the token budget
// with prefill chunks:
//   - short admissions: waiting sequences whose uncached remainder (after adopting cached
//     blocks) is at most short_prefill_tokens, in arrival order, ahead of everything below
//     (a request that resends a cached conversation gets its first token in the next step
//     instead of waiting behind a long prompt);
//   - running prefills (partly prefilled, or resumed), oldest first;
//   - admissions in arrival (FIFO) order, each only when its whole prompt fits beside what the
//     running sequences need next.
// Bypass is bounded: a sequence with prompt left to compute that later arrivals went ahead of
// in max_bypass steps turns the short lane off until its prompt is done, so long prompts are
// never starved. A waiting sequence whose next uncached block a running prefill is computing
// right now waits for it (it adopts the block once published instead of computing it again).
// With prefix caching, an admitted sequence first adopts the longest run of cached full blocks
// matching its tokens (shared read-only with whoever holds them) and computes only the rest; the
// blocks a step completes are published to the cache (docs/PREFIX_CACHE.md).
// When the KV cache runs out it recompute-preempts the newest running sequence (LIFO): its
// blocks are freed and it goes back to the waiting queue (at its place in arrival order) with
// its generated tokens, to be run again from position 0 when resumed.
// Speculative decoding (docs/SPECULATIVE.md): after the decodes, a decoding sequence's chunk
// grows by its draft (Sequence::draft) into blocks no running sequence needs, never by
// preempting; accept_draft() then keeps the accepted tokens' K/V, frees the rejected slots'
// blocks and publishes only accepted full blocks to the prefix cache.
// With a sliding window on every layer (SchedulerConfig::kv_window) a sequence releases the
// blocks behind the window of its next position after each step and adopts only the cached
// blocks its window reads; admission and fits_in_cache() count at most window_blocks() blocks
// per sequence (scheduling/kv_window.h, docs/PREFIX_CACHE.md).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <unordered_set>
#include <vector>

#include "scheduling/block_allocator.h"
#include "scheduling/sequence.h"
#include "model/step.h"

namespace flashserve {

struct SchedulerConfig {
  int max_num_seqs = 64;             // running sequences at once
  int max_num_batched_tokens = 512;  // tokens per step (decodes + prefill chunks)
  int block_size = 16;               // tokens per KV block
  bool enable_prefix_caching = true;  // adopt cached prefixes and publish full blocks
  // Short-prefill-first: a waiting sequence with at most this many tokens left to compute goes
  // ahead of longer ones and of running prefills; 0 = strict arrival order.
  int short_prefill_tokens = 256;
  // Steps a sequence with prompt left may be passed over by later arrivals before the short
  // lane closes until its prompt is done.
  int max_bypass = 4;
  // Sliding window shared by every layer (shared_kv_window(), scheduling/kv_window.h): blocks
  // wholly before the window of a sequence's next position are released. 0 = some layer attends
  // to the whole context: every block is kept.
  int kv_window = 0;
};

struct ScheduledChunk {
  Sequence* seq = nullptr;
  int num_tokens = 0;  // tokens seq->tokens[num_computed .. num_computed + num_tokens - 1]
  LogitsWanted logits = LogitsWanted::kNone;
  // Speculative decoding: of num_tokens, the last num_draft are draft tokens (seq->draft) after
  // the pending one; every row's logits are wanted (kAll) to verify them.
  int num_draft = 0;
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
  // before (arrival order), and its prompt + max_tokens must fit the whole cache
  // (fits_in_cache(); the engine refuses any other request at submit()). fits_in_cache() reads
  // only what construction fixed, so submitting threads may call it.
  void add(std::unique_ptr<Sequence> seq);
  bool fits_in_cache(int total_tokens) const;

  SchedulerOutput schedule();
  // Records that `out`'s chunks ran: their tokens now have K/V in the cache. Call after the
  // model step succeeded and before appending sampled tokens.
  void commit(const SchedulerOutput& out);
  // After commit(), for a chunk that verified a draft: the first `accepted` draft tokens were
  // appended to seq->tokens, so their K/V (written by the step) is kept; the slots of the
  // rejected ones are given back (blocks past the sequence's tokens are freed). Full blocks of
  // accepted tokens are published to the prefix cache here, never before.
  void accept_draft(Sequence* seq, int accepted);
  // Removes a sequence (finished, cancelled or failed) wherever it is and frees its blocks.
  // Returns false for an unknown id.
  bool remove(uint64_t id);

  Sequence* find(uint64_t id);
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  uint64_t num_preemptions() const { return num_preemptions_; }
  // Prefix cache: tokens of admitted sequences looked up in it, and those found (adopted).
  uint64_t prefix_queried_tokens() const { return prefix_queried_tokens_; }
  uint64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  const SchedulerConfig& config() const { return config_; }

 private:
  // Grows seq's block table to cover num_computed + num_tokens positions; false (and no change)
  // when not enough blocks are free.
  bool reserve(Sequence* seq, int num_tokens);
  // How many of seq's next `want` tokens fit in its blocks plus the free ones.
  int fit(const Sequence* seq, int want) const;
  // Blocks seq still lacks to hold all its tokens plus the next one it generates (under a
  // window: to hold the window of that next token).
  int blocks_to_next_token(const Sequence* seq) const;
  // The same for a sequence of `num_tokens` tokens whose table covers `table_blocks` blocks,
  // `held` of them held (the rest dropped behind the window).
  int blocks_lacking(int num_tokens, int table_blocks, int held) const;
  // Lengthens this step's decode chunks by their sequences' drafts, as far as the token budget
  // and the free blocks allow: a draft never preempts anything, and it leaves alone the blocks
  // the running sequences need for their next tokens.
  void schedule_drafts(SchedulerOutput* out, int* budget);
  // Preempts running_.back(), dropping its chunk from `out` if it was already scheduled.
  void preempt_newest(SchedulerOutput* out, int* budget);
  // Admits waiting sequences into this step. kShort: only those whose remainder after adoption
  // is at most short_prefill_tokens (and fits the budget whole), in arrival order; kFifo: in
  // arrival order, stopping at the first that does not fit. Both skip sequences waiting for a
  // block a running prefill computes (inflight). Returns the largest id admitted, 0 if none.
  enum class AdmitLane { kShort, kFifo };
  uint64_t admit(AdmitLane lane, SchedulerOutput* out, int* budget);
  // Hashes of the full blocks running prefills have yet to compute and publish (all of them,
  // or seq's), and whether the block a waiting seq would adopt next after its num_hits cached
  // ones is among them.
  void collect_inflight();
  void add_inflight(Sequence* seq);
  bool waits_for_inflight(Sequence* seq, size_t num_hits) const;
  // False when seq's remainder certainly exceeds short_prefill_tokens (one cache lookup).
  bool could_be_short(Sequence* seq) const;
  // The short lane looks this far down the waiting queue (each look may walk the cache).
  static constexpr size_t kShortLaneLookahead = 256;
  // A sequence with prompt left has been passed over max_bypass times: no more short lane.
  bool bypass_exhausted() const;
  // After a step whose short lane admitted sequences up to id `newest`: counts a bypass for
  // every older sequence that still has prompt left to compute.
  void count_bypasses(uint64_t newest, const SchedulerOutput& out);
  void insert_running(std::unique_ptr<Sequence> seq);
  void insert_waiting(std::unique_ptr<Sequence> seq);
  void free_blocks(Sequence* seq);
  // Prefix caching: whether seq may adopt cached blocks (not while it needs every prompt
  // position's logits), the cached prefix it would adopt (at most (num_tokens - 1) / block_size
  // blocks, so its last token is always computed and gives logits), adopting it, and publishing
  // the full blocks it has computed. Without a window the prefix is the longest run of cached
  // blocks from block 0; under a window, the longest prefix whose blocks inside the window of
  // its end are all cached (the blocks before that window are neither needed nor adopted).
  struct PrefixHit {
    int num_dropped = 0;          // leading blocks behind the window: not adopted
    std::vector<BlockId> blocks;  // cached blocks adopted after them
    int num_blocks() const { return num_dropped + static_cast<int>(blocks.size()); }
  };
  bool may_adopt(const Sequence* seq) const;
  PrefixHit cached_prefix(Sequence* seq) const;
  void adopt(Sequence* seq, const PrefixHit& hit);
  void publish_full_blocks(Sequence* seq);
  LogitsWanted logits_for(const Sequence* seq, int num_tokens) const;

  SchedulerConfig config_;
  BlockAllocator* blocks_;
  // Both sorted by id (arrival order). Without the short lane every running id is smaller than
  // every waiting id; with it a short later arrival may run while an older sequence waits.
  std::vector<std::unique_ptr<Sequence>> running_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::unordered_set<BlockHash, BlockHashHasher> inflight_;  // collect_inflight()
  uint64_t last_added_id_ = 0;
  bool any_added_ = false;
  uint64_t num_preemptions_ = 0;
  uint64_t prefix_queried_tokens_ = 0, prefix_hit_tokens_ = 0;
};

}  // namespace flashserve
