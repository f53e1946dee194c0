// BlockAllocator: allocation until exhaustion, reference counting, reuse, misuse throws.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"
#include "scheduling/block_allocator.h"

namespace flashserve {
namespace {

TEST(BlockAllocator, AllocatesEveryBlockOnceThenRunsOut) {
  BlockAllocator a(7);
  std::set<BlockId> seen;
  for (int i = 0; i < 7; ++i) {
    auto id = a.allocate();
    ASSERT_TRUE(id.has_value());
    EXPECT_GE(*id, 0);
    EXPECT_LT(*id, 7);
    EXPECT_TRUE(seen.insert(*id).second) << "block " << *id << " handed out twice";
    EXPECT_EQ(a.ref_count(*id), 1);
  }
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.num_used(), 7);
  EXPECT_FALSE(a.allocate().has_value());
  a.release(3);
  EXPECT_EQ(a.num_free(), 1);
  auto again = a.allocate();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, 3);
}

TEST(BlockAllocator, ZeroBlocks) {
  BlockAllocator a(0);
  EXPECT_FALSE(a.allocate().has_value());
  EXPECT_EQ(a.num_total(), 0);
}

TEST(BlockAllocator, RefCountFreesAtZero) {
  BlockAllocator a(2);
  BlockId b = *a.allocate();
  a.retain(b);
  a.retain(b);
  EXPECT_EQ(a.ref_count(b), 3);
  a.release(b);
  a.release(b);
  EXPECT_EQ(a.num_free(), 1) << "still held once";
  a.release(b);
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_EQ(a.ref_count(b), 0);
}

TEST(BlockAllocator, MisuseThrows) {
  BlockAllocator a(2);
  EXPECT_THROW(a.release(0), Error);  // free block
  EXPECT_THROW(a.retain(1), Error);   // free block
  EXPECT_THROW(a.release(2), Error);  // out of range
  EXPECT_THROW(a.release(-1), Error);
  EXPECT_THROW(BlockAllocator(-1), Error);
}

TEST(BlockAllocator, RandomOpsKeepCountsConsistent) {
  std::mt19937 rng(1234);
  const int n = 50;
  BlockAllocator a(n);
  std::vector<int> held(n, 0);  // our model of the ref counts
  for (int it = 0; it < 20000; ++it) {
    int op = rng() % 3;
    if (op == 0) {
      auto id = a.allocate();
      int free_model = 0;
      for (int h : held) free_model += h == 0;
      ASSERT_EQ(id.has_value(), free_model > 0);
      if (id) {
        ASSERT_EQ(held[*id], 0) << "allocated a held block";
        held[*id] = 1;
      }
    } else {
      int b = rng() % n;
      if (held[b] == 0) continue;
      if (op == 1) {
        a.retain(b);
        ++held[b];
      } else {
        a.release(b);
        --held[b];
      }
    }
    int used = 0;
    for (int h : held) used += h > 0;
    ASSERT_EQ(a.num_used(), used);
  }
  for (int b = 0; b < n; ++b) {
    ASSERT_EQ(a.ref_count(b), held[b]);
    while (held[b]-- > 0) a.release(b);
  }
  EXPECT_EQ(a.num_free(), n);
}

}  // namespace
}  // namespace flashserve
