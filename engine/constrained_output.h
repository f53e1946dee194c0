// ConstrainedOutput: one request's OutputConstraint (engine/engine.h) on the engine thread — the
// trigger state machine around a structured::Matcher: which tokens may come next (a mask) and
// advancing by each generated token. accept() only moves the trigger state (cheap, right after
// sampling); the matcher walks the region's new tokens in fill_mask(), which the engine runs
// while the device computes the next forward. The state is a function of the generated tokens
// alone, so a preempted and recomputed sequence (whose tokens are kept) keeps it; sync()
// replays them should they ever differ.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "structured/matcher.h"

namespace flashserve {

class ConstrainedOutput {
 public:
  // `c` is valid (EngineImpl::reject_reason checked it); empty end_tokens mean `eos_ids`.
  ConstrainedOutput(OutputConstraint c, std::span<const int32_t> eos_ids);

  // Whether the next token is constrained: inside a grammar region, or the first token of a
  // must_trigger request.
  bool masks_next() const;
  // The next token's mask (bit t % 32 of words[t / 32]: token t allowed). Inside a region: the
  // grammar's tokens, and end_tokens only where the grammar accepts (the vocabulary's other stop
  // tokens never). First feeds the matcher the region's tokens accepted since the last mask.
  // Throws flashserve::Error when the grammar fails (too ambiguous, a token it refuses) or
  // allows no token at all.
  void fill_mask(uint32_t* words);  // [mask_words(vocab_size)]
  // Advances by a generated token, which the last mask allowed (the engine checks every sampled
  // token against its mask); throws flashserve::Error for a non-trigger where must_trigger
  // wants one.
  void accept(int32_t token);
  // Brings the state to `generated` (all the request's generated tokens): accepts those not yet
  // seen; if fewer are left than were accepted, starts over and replays them.
  void sync(std::span<const int32_t> generated);
  // Speculative decoding: how many leading tokens of `draft` the constraint allows in a row from
  // here, so that a draft is cut before its first forbidden token; the state is left as it was.
  // Conservative where checking would need a new region: the count stops after a token that
  // opens or ends one.
  size_t allowed_prefix(std::span<const int32_t> draft);
  // True once the grammar region ended and no trigger can open another: the output is done.
  bool complete() const { return state_ == State::kComplete; }

 private:
  enum class State { kFree, kGrammar, kComplete };
  void reset();

  OutputConstraint c_;
  State state_ = State::kFree;
  std::optional<structured::Matcher> matcher_;  // in kGrammar: the current region's
  std::vector<int32_t> unmatched_;  // region tokens accepted, not yet fed to the matcher
  size_t num_accepted_ = 0;
};

}  // namespace flashserve
