// A step's sampling inputs: where each chunk's token is drawn, and the grammar masks of the
// constrained ones. The masks depend only on tokens already generated, so the engine computes
// them on the host between ModelRunner::launch() and finish(), while the device runs the forward.
#include <atomic>
#include <span>

#include "engine/engine_impl.h"
#include "engine/stop_rules.h"

namespace flashserve {
namespace {

// True when this step draws the chunk's sequence's next token (its last prompt chunk or a
// decode, verifying a draft or not), as process_outputs() reads it. The mask is the first
// verified position's; the others' follow the accepted tokens (next_draft_mask).
bool draws_token(const ScheduledChunk& c) {
  const Sequence& s = *c.seq;
  return c.logits != LogitsWanted::kNone &&
         s.num_computed + c.num_tokens - c.num_draft == s.num_tokens() &&
         !budget_spent(s.num_generated(), s.max_tokens);
}

std::span<const int32_t> generated(const Sequence& s) {
  return {s.tokens.data() + s.num_prompt_tokens, size_t(s.num_generated())};
}

}  // namespace

void EngineImpl::choose_sample_paths(const SchedulerOutput& out, StepPlan& plan) {
  chunk_mask_.assign(out.chunks.size(), -1);
  chunk_mask_error_.assign(out.chunks.size(), std::string());
  int64_t num_masked = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    StepChunk& ch = plan.chunks[i];
    const Sequence& seq = *out.chunks[i].seq;
    const ActiveRequest& a = active_.at(seq.id);
    const bool masked = a.constraint && draws_token(out.chunks[i]) && a.constraint->masks_next();
    if (masked) chunk_mask_[i] = num_masked++;
    ch.sample_path = choose_sample_path(
        a.sampling, vocab_size_, options_.sample_on_device && ch.logits == LogitsWanted::kLast,
        masked);
    if (ch.sample_path != SamplePath::kHost) ch.sample = sample_request(seq, a.sampling);
  }
  const size_t words = mask_words(vocab_size_);
  for (int64_t& m : chunk_mask_)
    if (m >= 0) m *= int64_t(words);
  masks_.resize(size_t(num_masked) * words);
}

void EngineImpl::fill_masks(const SchedulerOutput& out, StepPlan& plan) {
  masked_chunks_.clear();
  for (size_t i = 0; i < out.chunks.size(); ++i)
    if (chunk_mask_[i] >= 0) masked_chunks_.push_back(i);
  // Rows are independent (each request's matcher is its own; a grammar's mask cache is
  // thread-safe), so the pool's threads take them one at a time: a row inside a free string (a
  // full trie walk) costs far more than one whose mask is cached.
  auto fill = [&](size_t i) {
    const Sequence& seq = *out.chunks[i].seq;
    uint32_t* mask = masks_.data() + chunk_mask_[i];
    try {
      ConstrainedOutput& c = *active_.at(seq.id).constraint;
      c.sync(generated(seq));
      c.fill_mask(mask);
    } catch (const std::exception& e) {  // this request's grammar: process_outputs fails it
      chunk_mask_error_[i] = e.what();
      chunk_mask_[i] = -1;
      mask = nullptr;
    }
    if (plan.chunks[i].sample_path != SamplePath::kHost) plan.chunks[i].sample.allowed = mask;
  };
  std::atomic<size_t> next{0};
  mask_pool_->run(int(masked_chunks_.size()), [&](int) {
    for (size_t k = next++; k < masked_chunks_.size(); k = next++) fill(masked_chunks_[k]);
  });
}

}  // namespace flashserve
