// Speculative decoding on the engine thread (docs/SPECULATIVE.md): before each step, the drafts
// of the decoding sequences (the proposer's guesses, as long as the policy and the request's
// budget allow, cut before a token the output constraint forbids); while a verified chunk is
// read (step_outputs.cpp), the grammar mask of each position after the first, following the
// tokens accepted before it.
#include <algorithm>

#include "engine/engine_impl.h"

namespace flashserve {

void EngineImpl::propose_drafts() {
  if (!policy_) return;
  proposals_.clear();
  proposal_seqs_.clear();
  int decodes = 0;
  for (const auto& s : scheduler_.running()) decodes += s->num_pending() == 1 ? 1 : 0;
  for (const auto& s : scheduler_.running()) {
    Sequence* seq = s.get();
    seq->draft.clear();
    if (seq->num_pending() != 1 || seq->need_prompt_logprobs || seq->pooled) continue;
    const ActiveRequest& a = active_.at(seq->id);
    if (!a.speculate) continue;
    // The token after the draft is the target's own: the draft leaves room for it.
    const int room = seq->max_tokens - seq->num_generated() - 1;
    const int k = std::min(room, policy_->num_draft(a.draft_tokens, a.accepted_tokens, decodes));
    if (k <= 0) continue;
    proposals_.push_back({seq->id, seq->tokens, seq->num_prompt_tokens, k});
    proposal_seqs_.push_back(seq);
  }
  if (proposals_.empty()) return;
  options_.proposer->propose(proposals_, &drafts_);
  for (size_t i = 0; i < proposal_seqs_.size(); ++i) {
    std::vector<int32_t>& d = drafts_.at(i);
    // A draft is a guess: cut it at its first token the model could not have drawn.
    size_t n = std::min(d.size(), size_t(proposals_[i].max_draft));
    for (size_t j = 0; j < n; ++j)
      if (d[j] < 0 || d[j] >= vocab_size_) n = j;
    // ... and at its first token the output constraint forbids, which could never be drawn.
    Sequence& seq = *proposal_seqs_[i];
    ActiveRequest& a = active_.at(seq.id);
    if (a.constraint && n > 0) {
      try {
        a.constraint->sync(
            {seq.tokens.data() + seq.num_prompt_tokens, size_t(seq.num_generated())});
        n = std::min(n, a.constraint->allowed_prefix({d.data(), n}));
      } catch (const std::exception&) {  // the grammar failed: the mask reports it this step
        n = 0;
      }
    }
    seq.draft.assign(d.begin(), d.begin() + ptrdiff_t(n));
  }
}

const uint32_t* EngineImpl::next_draft_mask(ActiveRequest& a) {
  if (!a.constraint || !a.constraint->masks_next()) return nullptr;
  draft_mask_.resize(mask_words(vocab_size_));
  a.constraint->fill_mask(draft_mask_.data());
  return draft_mask_.data();
}

}  // namespace flashserve
