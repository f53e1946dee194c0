// The speculation policy: a decayed least-squares fit of step time against rows, and the draft
// length where the expected saving of one more draft token stops exceeding its row's cost.
#include "speculative/policy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace flashserve {
namespace {

constexpr double kDecay = 0.98;   // ~50 steps of memory
constexpr int kMinSteps = 8;      // steps before the fit is trusted

}  // namespace

SpeculationPolicy::SpeculationPolicy(int max_draft, bool adaptive)
    : max_draft_(max_draft), adaptive_(adaptive) {
  FS_CHECK(max_draft >= 1, "speculation needs at least one draft token, got ", max_draft);
}

void SpeculationPolicy::record_step(int rows, double seconds) {
  if (rows <= 0 || !(seconds >= 0)) return;
  const double x = rows;
  w_ = w_ * kDecay + 1;
  x_ = x_ * kDecay + x;
  y_ = y_ * kDecay + seconds;
  xx_ = xx_ * kDecay + x * x;
  xy_ = xy_ * kDecay + x * seconds;
  ++steps_;
}

bool SpeculationPolicy::fitted(double* fixed, double* per_row) const {
  if (steps_ < uint64_t(kMinSteps)) return false;
  const double var = xx_ * w_ - x_ * x_;  // w^2 times the variance of rows
  if (var <= 1e-9 * xx_ * w_) return false;  // one step size only: the slope is unknown
  const double slope = (xy_ * w_ - x_ * y_) / var;
  const double icept = (y_ - slope * x_) / w_;
  // Rounding or noise may give a negative part; a step never costs less than nothing.
  *per_row = std::max(slope, 0.0);
  *fixed = std::max(icept, 0.0);
  return true;
}

int SpeculationPolicy::num_draft(uint64_t proposed, uint64_t accepted, int decodes) const {
  if (!adaptive_) return max_draft_;
  double fixed = 0, per_row = 0;
  // Unknown cost: steps alternate between the longest draft and none, so that the fit sees
  // steps of different sizes.
  if (!fitted(&fixed, &per_row)) return steps_ % 2 == 0 ? max_draft_ : 0;
  if (per_row <= 0) return max_draft_;  // rows cost nothing measurable
  // Laplace's estimate: a sequence with no history counts as half right.
  const double alpha = (double(accepted) + 1) / (double(proposed) + 2);
  const int b = decodes < 1 ? 1 : decodes;
  const double token_cost = (fixed + per_row * b) / b;  // one token without speculation
  int k = 0;
  double keep = alpha;  // alpha^(k+1): draft k+1 is kept
  while (k < max_draft_ && keep * token_cost > per_row) {
    ++k;
    keep *= alpha;
  }
  return k;
}

}  // namespace flashserve
