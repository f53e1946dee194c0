// BlockAllocator: hands out KV-cache block ids and reference-counts them. Every block is in one
// of three states: used (held by at least one sequence), free (plain, no content), or cached
// (held by nobody, but its K/V is registered in the PrefixCache, so a later request with the
// same prefix can adopt it). A block whose last holder releases it becomes cached if it has
// content, else free; allocation takes a free block first and evicts the least recently used
// cached block only when none is free. used + free + cached == total always (check_consistent).
// Host-only policy; the ModelRunner owns the memory the ids index.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduling/prefix_cache.h"

namespace flashserve {

class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);

  // A block with reference count 1: a free one, else the least recently used cached one (its
  // content forgotten); nullopt when every block is used (an expected condition).
  std::optional<BlockId> allocate();
  // Adds a holder to a used block, or adopts a cached one (it becomes used again). Retaining a
  // free block throws.
  void retain(BlockId id);
  // Drops one holder; at count 0 the block becomes cached (it has content) or free. Releasing a
  // block nobody holds throws.
  void release(BlockId id);

  // Prefix caching. The block holding content `h` (used or cached), if any.
  std::optional<BlockId> lookup(const BlockHash& h) const { return cache_.find(h); }
  // Registers that used block `id` holds the complete K/V of content `h`; false (no change) when
  // it already has content or another block holds `h`.
  bool publish(BlockId id, const BlockHash& h);

  int num_total() const { return static_cast<int>(ref_counts_.size()); }
  int num_used() const { return num_used_; }
  int num_free() const { return static_cast<int>(free_list_.size()); }
  int num_cached() const { return cache_.num_parked(); }
  // Blocks allocate() can hand out: free ones plus evictable cached ones.
  int num_available() const { return num_free() + num_cached(); }
  uint64_t num_evictions() const { return num_evictions_; }
  int ref_count(BlockId id) const;
  bool is_cached(BlockId id) const { return cache_.is_parked(id); }
  const PrefixCache& cache() const { return cache_; }

  // Recounts every block's state from the reference counts, the free list and the cache's LRU
  // list, and throws unless each block is in exactly one state and used + free + cached equals
  // the total. O(num_blocks): for tests and checks, not per step.
  void check_consistent() const;

 private:
  void check_id(BlockId id) const;

  std::vector<BlockId> free_list_;  // a stack: the most recently freed block is reused first
  std::vector<int> ref_counts_;     // [num_blocks]
  int num_used_ = 0;                // blocks with a reference count > 0
  uint64_t num_evictions_ = 0;
  PrefixCache cache_;
};

}  // namespace flashserve
