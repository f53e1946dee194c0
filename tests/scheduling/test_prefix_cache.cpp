// The prefix cache's policy as plain C++: the hash chain (salt, position and every earlier token
// change a block's hash), the PrefixCache index and LRU order, and the BlockAllocator's three
// states (used / free / cached) with reference counts, adoption, release and eviction.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/error.h"
#include "scheduling/block_allocator.h"

namespace flashserve {
namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first = 1) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<BlockHash> hashes_of(const std::vector<int32_t>& tokens, std::string_view salt,
                                 int bs) {
  std::vector<BlockHash> h;
  extend_block_hashes(root_hash(salt), tokens, bs, &h);
  return h;
}

TEST(BlockHash, SameTokensSameSaltSameChain) {
  const auto t = iota_tokens(40);
  EXPECT_EQ(hashes_of(t, "a", 16), hashes_of(t, "a", 16));
  EXPECT_EQ(hashes_of(t, "a", 16).size(), 2u) << "the partial third block gets no hash";
}

TEST(BlockHash, SaltChangesEveryBlock) {
  const auto t = iota_tokens(48);
  const auto a = hashes_of(t, "tenant-a", 16), b = hashes_of(t, "tenant-b", 16);
  ASSERT_EQ(a.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NE(a[i], b[i]) << "block " << i;
  EXPECT_NE(root_hash(""), root_hash(std::string_view("\0", 1)));
}

TEST(BlockHash, AnyTokenChangesItsBlockAndEveryLaterOne) {
  const auto ref_tokens = iota_tokens(64);
  const auto ref = hashes_of(ref_tokens, "", 16);
  for (int j = 0; j < 64; ++j) {  // every position of every block, first and last included
    auto t = ref_tokens;
    t[j] += 1000;
    const auto got = hashes_of(t, "", 16);
    for (int b = 0; b < 4; ++b) {
      if (b < j / 16) EXPECT_EQ(got[b], ref[b]) << "token " << j << ", block " << b;
      else EXPECT_NE(got[b], ref[b]) << "token " << j << ", block " << b;
    }
  }
}

TEST(BlockHash, SameTokensAtAnotherPositionDiffer) {
  // Blocks 0 and 1 hold the same ids; K/V depends on position, so their hashes must differ.
  std::vector<int32_t> t(32, 7);
  const auto h = hashes_of(t, "", 16);
  EXPECT_NE(h[0], h[1]);
}

TEST(BlockHash, ExtendingStepByStepEqualsAtOnce) {
  const auto t = iota_tokens(100, 3);
  std::vector<BlockHash> step;
  for (size_t n = 0; n <= t.size(); n += 7) {
    extend_block_hashes(root_hash("s"), std::span<const int32_t>(t.data(), n), 8, &step);
  }
  extend_block_hashes(root_hash("s"), t, 8, &step);
  EXPECT_EQ(step, hashes_of(t, "s", 8));
}

BlockHash content(int i) { return hashes_of(iota_tokens(4, i), "", 4)[0]; }

TEST(PrefixCache, IndexRefusesDuplicates) {
  PrefixCache c(4);
  EXPECT_TRUE(c.insert(1, content(10)));
  EXPECT_FALSE(c.insert(2, content(10))) << "another block already holds this content";
  EXPECT_FALSE(c.insert(1, content(11))) << "block 1 already has content";
  EXPECT_EQ(c.find(content(10)), std::optional<BlockId>(1));
  EXPECT_FALSE(c.find(content(11)).has_value());
  EXPECT_TRUE(c.has_content(1));
  EXPECT_FALSE(c.has_content(2));
  EXPECT_EQ(c.num_entries(), 1);
}

TEST(PrefixCache, EvictsLeastRecentlyParkedFirst) {
  PrefixCache c(5);
  for (BlockId b = 0; b < 5; ++b) ASSERT_TRUE(c.insert(b, content(b)));
  for (BlockId b : {3, 0, 4, 1}) c.park(b);
  c.unpark(0);  // adopted again
  c.park(0);    // and released: now the most recent
  EXPECT_EQ(c.lru_order(), (std::vector<BlockId>{3, 4, 1, 0}));
  EXPECT_EQ(c.evict(), std::optional<BlockId>(3));
  EXPECT_FALSE(c.has_content(3));
  EXPECT_FALSE(c.find(content(3)).has_value()) << "an evicted block's content is forgotten";
  EXPECT_EQ(c.evict(), std::optional<BlockId>(4));
  EXPECT_EQ(c.evict(), std::optional<BlockId>(1));
  EXPECT_EQ(c.evict(), std::optional<BlockId>(0));
  EXPECT_FALSE(c.evict().has_value());
  EXPECT_TRUE(c.find(content(2)).has_value()) << "block 2 was never parked";
  EXPECT_THROW(c.unpark(2), Error);
  EXPECT_THROW(c.park(3), Error);  // no content any more
}

TEST(BlockAllocatorCache, ReleasedPublishedBlockIsCachedNotFree) {
  BlockAllocator a(4);
  BlockId x = *a.allocate(), y = *a.allocate();
  EXPECT_TRUE(a.publish(x, content(1)));
  a.release(x);
  a.release(y);
  EXPECT_EQ(a.num_used(), 0);
  EXPECT_EQ(a.num_cached(), 1);
  EXPECT_EQ(a.num_free(), 3);
  EXPECT_EQ(a.num_available(), 4);
  EXPECT_TRUE(a.is_cached(x));
  EXPECT_EQ(a.lookup(content(1)), std::optional<BlockId>(x));
  a.check_consistent();
}

TEST(BlockAllocatorCache, AdoptionIsReferenceCounted) {
  BlockAllocator a(3);
  BlockId x = *a.allocate();
  ASSERT_TRUE(a.publish(x, content(1)));
  a.retain(x);  // a second sequence adopts it while the first still holds it
  EXPECT_EQ(a.ref_count(x), 2);
  a.release(x);
  EXPECT_EQ(a.num_used(), 1);
  a.release(x);
  EXPECT_TRUE(a.is_cached(x));
  a.retain(x);  // adopted from the cache: used again, out of the LRU order
  EXPECT_EQ(a.ref_count(x), 1);
  EXPECT_FALSE(a.is_cached(x));
  EXPECT_EQ(a.num_used(), 1);
  a.check_consistent();
  a.release(x);
  EXPECT_THROW(a.release(x), Error);
  BlockId plain = *a.allocate();
  a.release(plain);
  EXPECT_THROW(a.retain(plain), Error) << "a plain free block cannot be adopted";
  EXPECT_THROW(a.publish(plain, content(2)), Error) << "nobody holds it";
}

TEST(BlockAllocatorCache, EvictsOnlyWhenNoFreeBlockIsLeft) {
  BlockAllocator a(4);
  std::vector<BlockId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(*a.allocate());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.publish(ids[i], content(i)));
  for (BlockId b : {ids[1], ids[0], ids[2], ids[3]}) a.release(b);  // LRU: 1, 0, 2; 3 free
  BlockId first = *a.allocate();
  EXPECT_EQ(first, ids[3]) << "the plain free block goes first";
  EXPECT_EQ(a.num_evictions(), 0u);
  EXPECT_EQ(*a.allocate(), ids[1]);
  EXPECT_EQ(*a.allocate(), ids[0]);
  EXPECT_EQ(a.num_evictions(), 2u);
  EXPECT_FALSE(a.lookup(content(1)).has_value());
  EXPECT_EQ(a.lookup(content(2)), std::optional<BlockId>(ids[2]));
  EXPECT_EQ(*a.allocate(), ids[2]);
  EXPECT_FALSE(a.allocate().has_value());
  EXPECT_EQ(a.num_used(), 4);
  a.check_consistent();
}

TEST(BlockAllocatorCache, RandomOperationsKeepTheAccountingExact) {
  std::mt19937 rng(5);
  BlockAllocator a(16);
  std::vector<BlockId> held;  // one entry per reference
  for (int step = 0; step < 5000; ++step) {
    switch (rng() % 4) {
      case 0:
        if (auto b = a.allocate()) held.push_back(*b);
        break;
      case 1:
        if (!held.empty()) {
          size_t i = rng() % held.size();
          a.release(held[i]);
          held.erase(held.begin() + long(i));
        }
        break;
      case 2:
        if (!held.empty()) a.publish(held[rng() % held.size()], content(int(rng() % 24)));
        break;
      case 3:
        if (auto b = a.lookup(content(int(rng() % 24)))) {
          a.retain(*b);
          held.push_back(*b);
        }
        break;
    }
    a.check_consistent();
  }
  for (BlockId b : held) a.release(b);
  EXPECT_EQ(a.num_used(), 0);
  EXPECT_EQ(a.num_free() + a.num_cached(), 16);
  a.check_consistent();
}

}  // namespace
}  // namespace flashserve
