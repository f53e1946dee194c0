// SpeculationPolicy: how many draft tokens a sequence gets this step, from what the engine
// measured — the step's cost per batched row and the sequence's acceptance so far — never from a
// fixed batch size. Draft token i (1-based) is kept only if the i - 1 before it were, with
// probability alpha^i; it costs one more row in the step. It is proposed while the time it saves
// on average, alpha^i times the time a token costs without speculation at this batch, exceeds
// that row's cost. At batch 1 a step costs about its fixed part (the weights are read once,
// whatever the rows), so drafts are cheap; as the batch grows the step's cost becomes
// proportional to its rows, and drafts stop paying unless nearly all are accepted.
#pragma once

#include <cstdint>

namespace flashserve {

class SpeculationPolicy {
 public:
  // `max_draft`: --num-speculative-tokens. `adaptive` false: always max_draft (tests, benches).
  SpeculationPolicy(int max_draft, bool adaptive);

  // A forward over `rows` batched token rows took `seconds`. The fit t = fixed + per_row * rows
  // weighs recent steps most (old ones decay), so it follows the load.
  void record_step(int rows, double seconds);
  // Draft length for a sequence whose drafts were accepted `accepted` times out of `proposed`,
  // in a step with `decodes` decoding sequences; at most max_draft.
  int num_draft(uint64_t proposed, uint64_t accepted, int decodes) const;

  // The fit (exposed for tests and metrics): seconds per step and per row; false until enough
  // steps of different sizes were seen. Meanwhile drafts alternate between max_draft (the first
  // step) and none, step by step, to give it those.
  bool fitted(double* fixed, double* per_row) const;
  int max_draft() const { return max_draft_; }

 private:
  const int max_draft_;
  const bool adaptive_;
  // Decayed sums of the least-squares fit: weight, rows, seconds, rows^2, rows * seconds.
  double w_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;
  uint64_t steps_ = 0;
};

}  // namespace flashserve
