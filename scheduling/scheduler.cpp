// Scheduler policy: decodes first, then prefill chunks under the token budget, FIFO admission,
// LIFO recompute-preemption (see scheduler.h).
#include "scheduling/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve {

int SchedulerOutput::num_batched_tokens() const {
  int n = 0;
  for (const ScheduledChunk& c : chunks) n += c.num_tokens;
  return n;
}

void SchedulerOutput::to_step_plan(StepPlan* plan) const {
  plan->chunks.clear();
  for (const ScheduledChunk& c : chunks) {
    StepChunk sc;
    sc.tokens = c.seq->tokens.data() + c.seq->num_computed;
    sc.num_tokens = c.num_tokens;
    sc.num_cached = c.seq->num_computed;
    sc.block_table = &c.seq->block_table;
    sc.logits = c.logits;
    plan->chunks.push_back(sc);
  }
}

StepPlan SchedulerOutput::to_step_plan() const {
  StepPlan plan;
  to_step_plan(&plan);
  return plan;
}

Scheduler::Scheduler(const SchedulerConfig& config, BlockAllocator* blocks)
    : config_(config), blocks_(blocks) {
  FS_CHECK(blocks_ != nullptr);
  FS_CHECK(config_.max_num_seqs >= 1, "max_num_seqs = ", config_.max_num_seqs);
  FS_CHECK(config_.max_num_batched_tokens >= 1, "max_num_batched_tokens = ",
           config_.max_num_batched_tokens);
  FS_CHECK(config_.block_size >= 1, "block_size = ", config_.block_size);
}

Scheduler::~Scheduler() {
  for (auto& s : running_) free_blocks(s.get());
}

bool Scheduler::fits_in_cache(int total_tokens) const {
  return blocks_for_tokens(total_tokens, config_.block_size) <= blocks_->num_total();
}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  FS_CHECK(seq != nullptr);
  FS_CHECK(!any_added_ || seq->id > last_added_id_, "sequence ids must increase: ", seq->id,
           " after ", last_added_id_);
  FS_CHECK(seq->num_tokens() >= 1 && seq->num_computed == 0 && seq->block_table.empty());
  any_added_ = true;
  last_added_id_ = seq->id;
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(std::move(seq));
}

int Scheduler::fit(const Sequence* seq, int want) const {
  int capacity = (static_cast<int>(seq->block_table.size()) + blocks_->num_free()) *
                     config_.block_size - seq->num_computed;
  return std::max(0, std::min(want, capacity));
}

bool Scheduler::reserve(Sequence* seq, int num_tokens) {
  int need = blocks_for_tokens(seq->num_computed + num_tokens, config_.block_size) -
             static_cast<int>(seq->block_table.size());
  if (need <= 0) return true;
  if (need > blocks_->num_free()) return false;
  for (int i = 0; i < need; ++i) seq->block_table.push_back(*blocks_->allocate());
  return true;
}

int Scheduler::blocks_to_next_token(const Sequence* seq) const {
  const int have = static_cast<int>(seq->block_table.size());
  return std::max(0, blocks_for_tokens(seq->num_tokens() + 1, config_.block_size) - have);
}

void Scheduler::free_blocks(Sequence* seq) {
  for (BlockId b : seq->block_table) blocks_->release(b);
  seq->block_table.clear();
}

LogitsWanted Scheduler::logits_for(const Sequence* seq, int num_tokens) const {
  if (seq->need_prompt_logprobs && seq->num_computed < seq->num_prompt_tokens) {
    return LogitsWanted::kAll;
  }
  if (seq->num_computed + num_tokens == seq->num_tokens()) return LogitsWanted::kLast;
  return LogitsWanted::kNone;
}

void Scheduler::preempt_newest(SchedulerOutput* out, int* budget) {
  FS_CHECK(!running_.empty());
  std::unique_ptr<Sequence> victim = std::move(running_.back());
  running_.pop_back();
  auto it = std::find_if(out->chunks.begin(), out->chunks.end(),
                         [&](const ScheduledChunk& c) { return c.seq == victim.get(); });
  if (it != out->chunks.end()) {  // already scheduled this step: give its tokens back
    *budget += it->num_tokens;
    out->chunks.erase(it);
  }
  free_blocks(victim.get());
  victim->num_computed = 0;  // recompute prompt + generated tokens on resume
  victim->status = SeqStatus::kWaiting;
  ++victim->num_preemptions;
  ++num_preemptions_;
  out->preempted.push_back(victim->id);
  waiting_.push_front(std::move(victim));
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;

  // 1. Decodes, oldest first. A decode that needs a new block and finds none preempts the
  //    newest running sequence, which may be itself.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i].get();
    if (seq->num_pending() != 1) continue;
    bool self_preempted = false;
    while (!reserve(seq, 1)) {
      self_preempted = running_.back().get() == seq;
      preempt_newest(&out, &budget);
      if (self_preempted) break;
    }
    if (self_preempted) break;  // it was the newest: nothing after it is left
    out.chunks.push_back({seq, 1, logits_for(seq, 1)});
    budget -= 1;
  }

  // 2. Prefill chunks of running sequences (partly prefilled, or resumed), oldest first; a chunk
  //    shrinks to the free blocks, and preempts the newest only when not one token fits.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i].get();
    if (seq->num_pending() <= 1) continue;
    int n = fit(seq, std::min(seq->num_pending(), budget));
    bool self_preempted = false;
    while (n == 0) {
      self_preempted = running_.back().get() == seq;
      preempt_newest(&out, &budget);
      if (self_preempted) break;
      n = fit(seq, std::min(seq->num_pending(), budget));
    }
    if (self_preempted) break;
    FS_CHECK(reserve(seq, n));
    out.chunks.push_back({seq, n, logits_for(seq, n)});
    budget -= n;
  }

  // 3. Admission in arrival order. Not in a step that preempted (the freed blocks would be
  //    taken straight back), and the head of the queue is never skipped for a later request.
  //    The head is admitted only when the free blocks, less what the running sequences need to
  //    reach their next token, hold its whole pending prompt and its first generated token:
  //    admitting it into blocks that a running decode takes next step would only get it
  //    preempted and its prefill thrown away, step after step (admission thrash). With nothing
  //    running it is admitted as soon as a chunk fits, so the queue always makes progress.
  if (out.preempted.empty()) {
    int available = blocks_->num_free();
    for (const auto& r : running_) available -= blocks_to_next_token(r.get());
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int>(running_.size()) < config_.max_num_seqs) {
      Sequence* seq = waiting_.front().get();
      const int need = blocks_to_next_token(seq);
      if (!running_.empty() && need > available) break;
      int n = fit(seq, std::min(seq->num_pending(), budget));
      if (n == 0) break;
      available -= need;
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
      seq->status = SeqStatus::kRunning;
      FS_CHECK(reserve(seq, n));
      out.chunks.push_back({seq, n, logits_for(seq, n)});
      budget -= n;
    }
  }
  return out;
}

void Scheduler::commit(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) {
    c.seq->num_computed += c.num_tokens;
    FS_CHECK(c.seq->num_computed <= c.seq->num_tokens());
  }
}

Sequence* Scheduler::find(uint64_t id) {
  for (auto& s : running_) {
    if (s->id == id) return s.get();
  }
  for (auto& s : waiting_) {
    if (s->id == id) return s.get();
  }
  return nullptr;
}

bool Scheduler::remove(uint64_t id) {
  auto by_id = [id](const std::unique_ptr<Sequence>& s) { return s->id == id; };
  auto r = std::find_if(running_.begin(), running_.end(), by_id);
  if (r != running_.end()) {
    free_blocks(r->get());
    (*r)->status = SeqStatus::kFinished;
    running_.erase(r);
    return true;
  }
  auto w = std::find_if(waiting_.begin(), waiting_.end(), by_id);
  if (w != waiting_.end()) {
    (*w)->status = SeqStatus::kFinished;
    waiting_.erase(w);
    return true;
  }
  return false;
}

}  // namespace flashserve
