// Scheduler policy: decodes first, then prefill chunks under the token budget (short admissions,
// running prefills, FIFO admissions), LIFO recompute-preemption, release of the blocks behind a
// sliding window (see scheduler.h).
#include "scheduling/scheduler.h"

#include <algorithm>
#include <span>

#include "core/error.h"
#include "scheduling/kv_window.h"

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
    sc.tokens = c.num_draft > 0 ? c.seq->verify_tokens.data()
                                : c.seq->tokens.data() + c.seq->num_computed;
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
  int need = blocks_for_tokens(total_tokens, config_.block_size);
  // Under a window a sequence holds its window's blocks only (a prefill chunk shrinks to fit).
  if (config_.kv_window > 0)
    need = std::min(need, window_blocks(config_.kv_window, config_.block_size));
  return need <= blocks_->num_total();
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
  int capacity = (static_cast<int>(seq->block_table.size()) + blocks_->num_available()) *
                     config_.block_size - seq->num_computed;
  return std::max(0, std::min(want, capacity));
}

bool Scheduler::reserve(Sequence* seq, int num_tokens) {
  int need = blocks_for_tokens(seq->num_computed + num_tokens, config_.block_size) -
             static_cast<int>(seq->block_table.size());
  if (need <= 0) return true;
  if (need > blocks_->num_available()) return false;
  for (int i = 0; i < need; ++i) seq->block_table.push_back(*blocks_->allocate());
  return true;
}

int Scheduler::blocks_to_next_token(const Sequence* seq) const {
  const int have = static_cast<int>(seq->block_table.size());
  return blocks_lacking(seq->num_tokens(), have, have - seq->num_dropped_blocks);
}

int Scheduler::blocks_lacking(int num_tokens, int table_blocks, int held) const {
  int lack = blocks_for_tokens(num_tokens + 1, config_.block_size) - table_blocks;
  if (config_.kv_window > 0)
    lack = std::min(lack, window_blocks(config_.kv_window, config_.block_size) - held);
  return std::max(0, lack);
}

void Scheduler::free_blocks(Sequence* seq) {
  // Last block first: cached blocks are evicted least recently released first, so a prefix's
  // tail goes before its head, and a block is not evicted while its descendants stay cached.
  // Entries dropped behind a window are sentinels, not held.
  for (size_t i = seq->block_table.size(); i-- > size_t(seq->num_dropped_blocks);)
    blocks_->release(seq->block_table[i]);
  seq->block_table.clear();
  seq->num_dropped_blocks = 0;
  seq->num_published_blocks = 0;
}

bool Scheduler::may_adopt(const Sequence* seq) const {
  return config_.enable_prefix_caching && !seq->need_prompt_logprobs;
}

Scheduler::PrefixHit Scheduler::cached_prefix(Sequence* seq) const {
  PrefixHit hit;
  if (!may_adopt(seq)) return hit;
  FS_CHECK(seq->block_table.empty() && seq->num_computed == 0);
  const int bs = config_.block_size, window = config_.kv_window;
  extend_block_hashes(seq->cache_root, seq->tokens, bs, &seq->block_hashes);
  const int max_blocks =
      std::min((seq->num_tokens() - 1) / bs, static_cast<int>(seq->block_hashes.size()));
  std::vector<BlockId> found;  // [blocks looked up]; a miss's entry is never adopted
  int run_start = 0, best = 0;  // first block of the current run of hits; longest prefix found
  for (int i = 0; i < max_blocks; ++i) {
    auto b = blocks_->lookup(seq->block_hashes[size_t(i)]);
    found.push_back(b.value_or(kDroppedBlock));
    if (!b) {
      if (window == 0) break;  // without a window a prefix needs every block from 0
      run_start = i + 1;
      continue;
    }
    if (blocks_before_window((i + 1) * bs, window, bs) >= run_start) best = i + 1;
  }
  hit.num_dropped = blocks_before_window(best * bs, window, bs);
  hit.blocks.assign(found.begin() + hit.num_dropped, found.begin() + best);
  return hit;
}

void Scheduler::adopt(Sequence* seq, const PrefixHit& hit) {
  seq->block_table.assign(size_t(hit.num_dropped), kDroppedBlock);
  seq->num_dropped_blocks = hit.num_dropped;
  for (BlockId b : hit.blocks) {
    blocks_->retain(b);
    seq->block_table.push_back(b);
  }
  seq->num_computed = hit.num_blocks() * config_.block_size;
  seq->num_published_blocks = hit.num_blocks();
  seq->num_cached_prompt_tokens = std::min(seq->num_computed, seq->num_prompt_tokens);
}

void Scheduler::publish_full_blocks(Sequence* seq) {
  if (!config_.enable_prefix_caching) return;
  const int full = seq->num_computed / config_.block_size;
  if (seq->num_published_blocks >= full) return;
  extend_block_hashes(seq->cache_root,
                      std::span<const int32_t>(seq->tokens.data(), size_t(full) * config_.block_size),
                      config_.block_size, &seq->block_hashes);
  for (; seq->num_published_blocks < full; ++seq->num_published_blocks) {
    const int i = seq->num_published_blocks;
    blocks_->publish(seq->block_table[i], seq->block_hashes[i]);
  }
}

LogitsWanted Scheduler::logits_for(const Sequence* seq, int num_tokens) const {
  if (seq->need_prompt_logprobs && seq->num_computed < seq->num_prompt_tokens) {
    return LogitsWanted::kAll;
  }
  if (seq->num_computed + num_tokens < seq->num_tokens()) return LogitsWanted::kNone;
  return seq->pooled ? LogitsWanted::kHidden : LogitsWanted::kLast;
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
  victim->draft.clear();
  victim->verify_tokens.clear();
  victim->num_computed = 0;  // recompute prompt + generated tokens on resume
  victim->status = SeqStatus::kWaiting;
  victim->num_bypassed = 0;
  ++victim->num_preemptions;
  ++num_preemptions_;
  out->preempted.push_back(victim->id);
  insert_waiting(std::move(victim));
}

void Scheduler::insert_running(std::unique_ptr<Sequence> seq) {
  auto pos = std::upper_bound(running_.begin(), running_.end(), seq->id,
                              [](uint64_t id, const auto& s) { return id < s->id; });
  running_.insert(pos, std::move(seq));
}

void Scheduler::insert_waiting(std::unique_ptr<Sequence> seq) {
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), seq->id,
                              [](uint64_t id, const auto& s) { return id < s->id; });
  waiting_.insert(pos, std::move(seq));
}

void Scheduler::add_inflight(Sequence* seq) {
  if (!config_.enable_prefix_caching || seq->num_pending() <= 1) return;  // decoding: nothing
  extend_block_hashes(seq->cache_root, seq->tokens, config_.block_size, &seq->block_hashes);
  for (size_t i = size_t(seq->num_published_blocks); i < seq->block_hashes.size(); ++i)
    inflight_.insert(seq->block_hashes[i]);
}

bool Scheduler::waits_for_inflight(Sequence* seq, size_t num_hits) const {
  if (inflight_.empty() || !may_adopt(seq)) return false;
  const size_t max_blocks = size_t((seq->num_tokens() - 1) / config_.block_size);
  // cached_prefix() hashed seq's full blocks; the block after its hits is the next it would adopt.
  return num_hits < max_blocks && inflight_.count(seq->block_hashes[num_hits]) > 0;
}

bool Scheduler::could_be_short(Sequence* seq) const {
  const int bs = config_.block_size, len = config_.short_prefill_tokens;
  if (seq->num_tokens() <= len) return true;
  if (!may_adopt(seq)) return false;
  // Short needs at least `hits` adopted blocks, so block hits - 1 must be cached: one lookup
  // rejects most long ones without walking the whole chain. (Under a window a longer prefix
  // may be adoptable with block hits - 1 evicted; such a sequence goes in arrival order.)
  const int hits = (seq->num_tokens() - len + bs - 1) / bs;
  if (hits > (seq->num_tokens() - 1) / bs) return false;
  extend_block_hashes(seq->cache_root, seq->tokens, bs, &seq->block_hashes);
  return blocks_->lookup(seq->block_hashes[size_t(hits - 1)]).has_value();
}

bool Scheduler::bypass_exhausted() const {
  for (const auto& w : waiting_)
    if (w->num_bypassed >= config_.max_bypass) return true;
  for (const auto& r : running_)
    if (r->num_pending() > 1 && r->num_bypassed >= config_.max_bypass) return true;
  return false;
}

void Scheduler::count_bypasses(uint64_t newest, const SchedulerOutput& out) {
  for (auto& w : waiting_)
    if (w->id < newest) ++w->num_bypassed;
  for (auto& r : running_) {
    if (r->id >= newest || r->num_pending() <= 1) continue;
    int got = 0;
    for (const ScheduledChunk& c : out.chunks)
      if (c.seq == r.get()) got = c.num_tokens;
    if (got < r->num_pending()) ++r->num_bypassed;
  }
}

void Scheduler::collect_inflight() {
  inflight_.clear();
  for (auto& r : running_) add_inflight(r.get());
}

// The head is admitted only when the free blocks, less what the running sequences need to reach
// their next token, hold its whole pending prompt and its first generated token: admitting it
// into blocks that a running decode takes next step would only get it preempted and its prefill
// thrown away, step after step (admission thrash). With nothing running it is admitted as soon
// as a chunk fits, so the queue always makes progress. In the FIFO lane a sequence that does not
// fit stops admission (it is never skipped for a later one); only sequences waiting for an
// in-flight block are passed over (they adopt it next step).
uint64_t Scheduler::admit(AdmitLane lane, SchedulerOutput* out, int* budget) {
  const bool short_lane = lane == AdmitLane::kShort;
  // Cached blocks nobody holds count as available: allocation evicts them when needed.
  int available = blocks_->num_available();
  for (const auto& r : running_) available -= blocks_to_next_token(r.get());
  uint64_t newest = 0;
  size_t i = 0, looked = 0;
  while (i < waiting_.size() && *budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_[i].get();
    if (short_lane && (++looked > kShortLaneLookahead)) break;
    if (short_lane && !could_be_short(seq)) {
      ++i;
      continue;
    }
    // With a cached prefix it needs new blocks only for the rest, but adopting a cached block
    // that nobody holds takes it out of the available ones too.
    const PrefixHit hit = cached_prefix(seq);
    const int remainder = seq->num_tokens() - hit.num_blocks() * config_.block_size;
    if (waits_for_inflight(seq, size_t(hit.num_blocks())) ||
        (short_lane && (remainder > config_.short_prefill_tokens || remainder > *budget))) {
      ++i;
      continue;
    }
    int adopted_unheld = 0;
    for (BlockId b : hit.blocks) adopted_unheld += blocks_->is_cached(b) ? 1 : 0;
    const int need = blocks_lacking(seq->num_tokens(), hit.num_blocks(),
                                    static_cast<int>(hit.blocks.size())) + adopted_unheld;
    if (!running_.empty() && need > available) break;
    adopt(seq, hit);
    const int n = fit(seq, std::min(seq->num_pending(), *budget));
    if (n == 0) {  // give the adopted blocks back (they stay cached) and wait
      free_blocks(seq);
      seq->num_computed = 0;
      break;
    }
    available -= need;
    if (may_adopt(seq)) {
      prefix_queried_tokens_ += static_cast<uint64_t>(seq->num_tokens());
      prefix_hit_tokens_ += static_cast<uint64_t>(seq->num_computed);
    }
    std::unique_ptr<Sequence> owned = std::move(waiting_[i]);
    waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(i));
    seq->status = SeqStatus::kRunning;
    insert_running(std::move(owned));
    FS_CHECK(reserve(seq, n));
    out->chunks.push_back({seq, n, logits_for(seq, n)});
    *budget -= n;
    add_inflight(seq);  // later waiting sequences sharing its blocks wait for them
    newest = std::max(newest, seq->id);
  }
  return newest;
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
  schedule_drafts(&out, &budget);

  // 2. Short admissions: waiting sequences that need little prefill go ahead of long ones (and
  //    of running prefills) unless someone was passed over max_bypass times already. Not in a
  //    step that preempted (the freed blocks would be taken straight back).
  collect_inflight();
  const size_t first_short = out.chunks.size();
  uint64_t newest_short = 0;
  if (out.preempted.empty() && config_.short_prefill_tokens > 0 && !bypass_exhausted())
    newest_short = admit(AdmitLane::kShort, &out, &budget);
  const auto admitted_short = [&](const Sequence* seq) {
    return std::any_of(out.chunks.begin() + ptrdiff_t(first_short), out.chunks.end(),
                       [&](const ScheduledChunk& c) { return c.seq == seq; });
  };

  // 3. Prefill chunks of running sequences (partly prefilled, or resumed), oldest first; a chunk
  //    shrinks to the free blocks, and preempts the newest only when not one token fits.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i].get();
    if (seq->num_pending() <= 1 || (newest_short > 0 && admitted_short(seq))) continue;
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

  // 4. Admission in arrival order, if nothing was preempted.
  if (out.preempted.empty()) admit(AdmitLane::kFifo, &out, &budget);
  if (newest_short > 0) count_bypasses(newest_short, out);
  return out;
}

void Scheduler::schedule_drafts(SchedulerOutput* out, int* budget) {
  // This step's decodes hold their slots already; beyond those, keep what every running
  // sequence lacks for all its tokens and the next (a prefill's whole rest), as admission does.
  int spare = blocks_->num_available();
  for (const auto& r : running_) spare -= blocks_to_next_token(r.get());
  for (ScheduledChunk& c : out->chunks) {
    Sequence* seq = c.seq;
    seq->verify_tokens.clear();
    if (c.num_tokens != 1 || seq->draft.empty() || c.logits != LogitsWanted::kLast) continue;
    int n = std::min(static_cast<int>(seq->draft.size()), *budget);
    // Blocks the longer chunk needs beyond those it holds; the window's drop comes after.
    const auto extra = [&](int k) {
      return std::max(0, blocks_for_tokens(seq->num_computed + 1 + k, config_.block_size) -
                             static_cast<int>(seq->block_table.size()));
    };
    while (n > 0 && extra(n) > spare) --n;
    if (n == 0) continue;
    spare -= extra(n);
    FS_CHECK(reserve(seq, 1 + n));
    seq->verify_tokens.push_back(seq->tokens.back());
    seq->verify_tokens.insert(seq->verify_tokens.end(), seq->draft.begin(),
                              seq->draft.begin() + n);
    c.num_tokens = 1 + n;
    c.num_draft = n;
    c.logits = LogitsWanted::kAll;
    *budget -= n;
  }
}

void Scheduler::accept_draft(Sequence* seq, int accepted) {
  FS_CHECK(accepted >= 0 && seq->num_computed + accepted <= seq->num_tokens(),
           "accepting ", accepted, " draft tokens of sequence ", seq->id);
  seq->num_computed += accepted;
  seq->draft.clear();
  seq->verify_tokens.clear();
  publish_full_blocks(seq);
  drop_blocks_before_window(seq, blocks_, config_.kv_window, config_.block_size);
  // The rejected tokens' slots: blocks past those the sequence's tokens fill go back.
  const size_t keep = size_t(blocks_for_tokens(seq->num_tokens(), config_.block_size));
  while (seq->block_table.size() > keep &&
         seq->block_table.size() > size_t(seq->num_dropped_blocks)) {
    blocks_->release(seq->block_table.back());
    seq->block_table.pop_back();
  }
}

void Scheduler::commit(const SchedulerOutput& out) {
  for (const ScheduledChunk& c : out.chunks) {
    // A verifying chunk: only its pending token is known to stay; accept_draft adds the rest.
    c.seq->num_computed += c.num_tokens - c.num_draft;
    FS_CHECK(c.seq->num_computed <= c.seq->num_tokens());
    publish_full_blocks(c.seq);  // before the window drops any of them
    drop_blocks_before_window(c.seq, blocks_, config_.kv_window, config_.block_size);
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
