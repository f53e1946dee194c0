// PrefixCache: the content index of the KV blocks for automatic prefix caching — which block
// holds the K/V of which full token block (by BlockHash) — and the least-recently-used order of
// the cached blocks that no sequence holds. The BlockAllocator owns one and consults it: a
// released block with content is parked here instead of going to the free list, and allocation
// evicts the least recently parked one only when no plain free block is left. Host-only, no
// reference counts (those are the allocator's).
#pragma once

#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

#include "scheduling/block_hash.h"

namespace flashserve {

using BlockId = int32_t;

class PrefixCache {
 public:
  explicit PrefixCache(int num_blocks);
  PrefixCache(const PrefixCache&) = delete;  // lru_pos_ holds iterators into lru_
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The block holding content `h`, if any (held by sequences or parked).
  std::optional<BlockId> find(const BlockHash& h) const;
  // Records that block `id` holds content `h`. False, and no change, when `id` already has
  // content or another block already holds `h` (two sequences computed the same block at once:
  // the first one stays the cached copy, the second is an ordinary block).
  bool insert(BlockId id, const BlockHash& h);
  bool has_content(BlockId id) const;

  // `id` (with content) is no longer held by anyone: it becomes the most recently used parked
  // block, reusable until evicted.
  void park(BlockId id);
  // `id` is parked and adopted again: it leaves the LRU order.
  void unpark(BlockId id);
  bool is_parked(BlockId id) const;
  // Forgets the content of the least recently used parked block and returns it; nullopt when
  // none is parked.
  std::optional<BlockId> evict();

  int num_parked() const { return static_cast<int>(lru_.size()); }
  int num_entries() const { return static_cast<int>(by_hash_.size()); }
  // Parked blocks from least to most recently used (tests, consistency checks).
  std::vector<BlockId> lru_order() const { return {lru_.begin(), lru_.end()}; }

 private:
  void check_id(BlockId id) const;

  std::unordered_map<BlockHash, BlockId, BlockHashHasher> by_hash_;
  std::vector<std::optional<BlockHash>> content_;      // [num_blocks]
  std::list<BlockId> lru_;                             // front: least recently used
  std::vector<std::list<BlockId>::iterator> lru_pos_;  // [num_blocks]; lru_.end(): not parked
};

}  // namespace flashserve
