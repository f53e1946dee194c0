// ConstrainedOutput: free text until a trigger, a grammar region until an end token, again
// (see engine/constrained_output.h).
#include "engine/constrained_output.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace flashserve {
namespace {

bool contains(const std::vector<int32_t>& ids, int32_t t) {
  return std::find(ids.begin(), ids.end(), t) != ids.end();
}
void set_bit(uint32_t* words, int32_t t, bool on) {
  const uint32_t bit = 1u << (t % 32);
  words[t / 32] = on ? words[t / 32] | bit : words[t / 32] & ~bit;
}

}  // namespace

ConstrainedOutput::ConstrainedOutput(OutputConstraint c, std::span<const int32_t> eos_ids)
    : c_(std::move(c)) {
  if (c_.end_tokens.empty()) c_.end_tokens.assign(eos_ids.begin(), eos_ids.end());
  reset();
}

void ConstrainedOutput::reset() {
  num_accepted_ = 0;
  matcher_.reset();
  unmatched_.clear();
  state_ = State::kFree;
  if (c_.triggers.empty()) {  // the grammar applies from the first token
    state_ = State::kGrammar;
    matcher_.emplace(c_.grammar);
  }
}

bool ConstrainedOutput::masks_next() const {
  return state_ == State::kGrammar || (state_ == State::kFree && c_.must_trigger && num_accepted_ == 0);
}

void ConstrainedOutput::fill_mask(uint32_t* words) {
  const size_t n = c_.grammar->trie().mask_words();
  if (state_ != State::kGrammar) {  // must_trigger's first token: a trigger, nothing else
    std::memset(words, 0, n * sizeof(uint32_t));
    for (int32_t t : c_.triggers) set_bit(words, t, true);
    return;
  }
  for (int32_t t : unmatched_)
    FS_CHECK(matcher_->accept_token(t), "structured output: token ", t,
             " is not allowed by the grammar here");
  unmatched_.clear();
  matcher_->fill_next_token_mask(words);
  for (int32_t t : c_.grammar->trie().vocabulary().stop_ids)
    if (t >= 0 && t < c_.grammar->trie().vocab_size()) set_bit(words, t, false);
  const bool accepting = matcher_->is_accepting();
  for (int32_t t : c_.end_tokens) set_bit(words, t, accepting);
  FS_CHECK(std::any_of(words, words + n, [](uint32_t w) { return w != 0; }),
           "structured output: no token of the vocabulary can continue the output here");
}

void ConstrainedOutput::accept(int32_t token) {
  ++num_accepted_;
  switch (state_) {
    case State::kFree:
      if (contains(c_.triggers, token)) {
        state_ = State::kGrammar;
        matcher_.emplace(c_.grammar);
      } else {
        FS_CHECK(!(c_.must_trigger && num_accepted_ == 1), "structured output: token ", token,
                 " is not a trigger, and the output must begin with one");
      }
      return;
    case State::kGrammar:
      if (contains(c_.end_tokens, token)) {  // the mask allowed it: the grammar accepts
        matcher_.reset();
        unmatched_.clear();
        state_ = c_.triggers.empty() ? State::kComplete : State::kFree;
        return;
      }
      unmatched_.push_back(token);
      return;
    case State::kComplete:
      FS_THROW("structured output: token ", token, " after the output was complete");
  }
}

size_t ConstrainedOutput::allowed_prefix(std::span<const int32_t> draft) {
  if (draft.empty() || state_ == State::kComplete) return 0;
  if (state_ == State::kFree) {  // free text: up to and including the first trigger
    for (size_t i = 0; i < draft.size(); ++i) {
      const bool trigger = contains(c_.triggers, draft[i]);
      if (i == 0 && c_.must_trigger && num_accepted_ == 0 && !trigger) return 0;
      if (trigger) return i + 1;
    }
    return draft.size();
  }
  for (int32_t t : unmatched_)  // as fill_mask() would, first
    FS_CHECK(matcher_->accept_token(t), "structured output: token ", t,
             " is not allowed by the grammar here");
  unmatched_.clear();
  const auto& stop_ids = c_.grammar->trie().vocabulary().stop_ids;
  size_t n = 0;
  int fed = 0;  // tokens given to the matcher, taken back at the end
  for (; n < draft.size(); ++n) {
    const int32_t t = draft[n];
    if (contains(c_.end_tokens, t)) {  // ends the region: allowed where the grammar accepts
      if (matcher_->is_accepting()) ++n;
      break;
    }
    if (contains(stop_ids, t) || !matcher_->accept_token(t)) break;
    ++fed;
  }
  FS_CHECK(matcher_->rollback(fed), "structured output: could not take back ", fed, " tokens");
  return n;
}

void ConstrainedOutput::sync(std::span<const int32_t> generated) {
  if (generated.size() < num_accepted_) reset();  // tokens were taken back: replay from the start
  for (size_t i = num_accepted_; i < generated.size(); ++i) accept(generated[i]);
}

}  // namespace flashserve
