// The speculation policy sizes drafts from a fitted step cost: long where a step's cost is its
// fixed part (memory-bound decode at a small batch), short or none where each row costs as much
// as a whole step's share per sequence (compute-bound, a large batch), and by acceptance.
#include <gtest/gtest.h>

#include "core/error.h"
#include "speculative/policy.h"

namespace flashserve {
namespace {

// Feeds steps of 1..64 rows costing fixed + per_row * rows seconds.
void feed(SpeculationPolicy& p, double fixed, double per_row) {
  for (int i = 0; i < 64; ++i) {
    const int rows = 1 + (i * 7) % 64;
    p.record_step(rows, fixed + per_row * rows);
  }
}

TEST(SpeculationPolicy, FitsTheStepCost) {
  SpeculationPolicy p(4, true);
  double fixed = 0, per_row = 0;
  EXPECT_FALSE(p.fitted(&fixed, &per_row));
  EXPECT_EQ(p.num_draft(0, 0, 1), 4);  // nothing measured yet: the longest draft, to measure
  p.record_step(5, 0.010 + 0.0001 * 5);
  EXPECT_EQ(p.num_draft(0, 0, 1), 0);  // then none, for a step of another size
  feed(p, 0.010, 0.0001);
  ASSERT_TRUE(p.fitted(&fixed, &per_row));
  EXPECT_NEAR(fixed, 0.010, 1e-6);
  EXPECT_NEAR(per_row, 0.0001, 1e-8);
}

TEST(SpeculationPolicy, OneStepSizeLeavesTheSlopeUnknown) {
  SpeculationPolicy p(4, true);
  for (int i = 0; i < 50; ++i) p.record_step(8, 0.01);
  double fixed = 0, per_row = 0;
  EXPECT_FALSE(p.fitted(&fixed, &per_row));
  EXPECT_EQ(p.num_draft(10, 1, 8), 4);  // alternating, whatever the acceptance
  p.record_step(8, 0.01);
  EXPECT_EQ(p.num_draft(10, 1, 8), 0);
}

TEST(SpeculationPolicy, MemoryBoundSpeculatesComputeBoundDoesNot) {
  SpeculationPolicy p(7, true);
  feed(p, 0.010, 0.0001);  // a step is 100 rows' worth of fixed cost
  // Batch 1 with good acceptance: every draft pays.
  EXPECT_EQ(p.num_draft(100, 80, 1), 7);
  // Batch 64: a token costs 0.0001 + 0.01 / 64 = 2.6 rows; only the first drafts of a well
  // accepted sequence pay, and none of a poorly accepted one.
  const int at64 = p.num_draft(100, 80, 64);
  EXPECT_GE(at64, 1);
  EXPECT_LT(at64, 7);
  EXPECT_EQ(p.num_draft(100, 10, 64), 0);
  // More acceptance never gives a shorter draft; a larger batch never a longer one.
  for (int b : {1, 4, 16, 64, 256})
    for (uint64_t acc = 0; acc < 100; acc += 10)
      EXPECT_LE(p.num_draft(100, acc, b), p.num_draft(100, acc + 10, b)) << b << " " << acc;
  for (uint64_t acc : {20u, 50u, 90u})
    for (int b = 1; b < 256; b *= 2)
      EXPECT_GE(p.num_draft(100, acc, b), p.num_draft(100, acc, b * 2)) << b << " " << acc;

  SpeculationPolicy compute_bound(7, true);
  feed(compute_bound, 0.0, 0.001);  // every row costs the same, nothing is fixed
  EXPECT_EQ(compute_bound.num_draft(100, 90, 1), 0);
}

TEST(SpeculationPolicy, AlwaysIgnoresTheMeasurements) {
  SpeculationPolicy p(3, false);
  feed(p, 0.0, 0.001);
  EXPECT_EQ(p.num_draft(100, 0, 64), 3);
  EXPECT_THROW(SpeculationPolicy(0, true), Error);
}

}  // namespace
}  // namespace flashserve
