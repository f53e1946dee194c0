// The decode-graph policy (model/decode_graphs.*): batch buckets, table strides, and the cache
// that drops every graph once the buffers they were recorded over move.
#include "model/decode_graphs.h"

#include <gtest/gtest.h>

namespace flashserve {
namespace {

TEST(GraphBuckets, SmallestBucketThatHoldsTheBatch) {
  EXPECT_EQ(graph_batch_bucket(1, 256), 1);
  EXPECT_EQ(graph_batch_bucket(2, 256), 2);
  EXPECT_EQ(graph_batch_bucket(3, 256), 4);
  EXPECT_EQ(graph_batch_bucket(4, 256), 4);
  EXPECT_EQ(graph_batch_bucket(5, 256), 8);
  EXPECT_EQ(graph_batch_bucket(9, 256), 16);
  EXPECT_EQ(graph_batch_bucket(17, 256), 24);
  EXPECT_EQ(graph_batch_bucket(256, 256), 256);
  for (int n = 1; n <= 300; ++n) {
    const int b = graph_batch_bucket(n, 300);
    EXPECT_GE(b, n);
    EXPECT_LE(b - n, 7) << n;  // padding never costs more than 7 rows
  }
}

TEST(GraphBuckets, OverTheLimitOrEmptyRunsEagerly) {
  EXPECT_EQ(graph_batch_bucket(0, 256), 0);
  EXPECT_EQ(graph_batch_bucket(257, 256), 0);
  EXPECT_EQ(graph_batch_bucket(1, 0), 0);  // graphs off
  EXPECT_EQ(graph_batch_bucket(13, 13), 13);  // the limit itself is a bucket
  EXPECT_EQ(graph_batch_bucket(11, 13), 13);
}

TEST(GraphBuckets, TableStrideIsAPowerOfTwoOfAtLeast16) {
  EXPECT_EQ(graph_table_stride(0), 16);
  EXPECT_EQ(graph_table_stride(16), 16);
  EXPECT_EQ(graph_table_stride(17), 32);
  EXPECT_EQ(graph_table_stride(1000), 1024);
}

std::shared_ptr<void> token(int v) { return std::make_shared<int>(v); }

TEST(GraphCache, FindsWhatWasInsertedUnderTheSameEpoch) {
  GraphCache c;
  const GraphKey a{8, 32, 5}, b{8, 32, 6}, d{16, 32, 5};
  EXPECT_EQ(c.find(a, 0), nullptr);
  auto g = token(1);
  c.insert(a, 0, g);
  EXPECT_EQ(c.find(a, 0), g);
  EXPECT_EQ(c.find(b, 0), nullptr);  // another launch configuration
  EXPECT_EQ(c.find(d, 0), nullptr);  // another bucket
  EXPECT_EQ(c.captures(), 1u);
}

TEST(GraphCache, ANewEpochDropsEveryGraph) {
  GraphCache c;
  c.insert({1, 16, 0}, 3, token(1));
  c.insert({2, 16, 0}, 3, token(2));
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.find({1, 16, 0}, 4), nullptr);  // buffers moved: stale
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.find({2, 16, 0}, 3), nullptr);  // and the old epoch does not come back
}

TEST(GraphCache, EvictsTheOldestPastCapacity) {
  GraphCache c(2);
  c.insert({1, 16, 0}, 0, token(1));
  c.insert({2, 16, 0}, 0, token(2));
  c.insert({4, 16, 0}, 0, token(4));
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.find({1, 16, 0}, 0), nullptr);
  EXPECT_NE(c.find({2, 16, 0}, 0), nullptr);
  EXPECT_NE(c.find({4, 16, 0}, 0), nullptr);
}

}  // namespace
}  // namespace flashserve
