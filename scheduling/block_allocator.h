// BlockAllocator: hands out KV-cache block ids from a free list and reference-counts them, so a
// block returns to the free list when its last holder releases it. Host-only policy; the
// ModelRunner owns the memory the ids index.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace flashserve {

using BlockId = int32_t;

class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);

  // A free block with reference count 1; nullopt when none is free (an expected condition).
  std::optional<BlockId> allocate();
  // Adds a holder to an allocated block (prefix sharing).
  void retain(BlockId id);
  // Drops one holder; the block is free again at count 0. Releasing a free block throws.
  void release(BlockId id);

  int num_total() const { return static_cast<int>(ref_counts_.size()); }
  int num_free() const { return static_cast<int>(free_list_.size()); }
  int num_used() const { return num_total() - num_free(); }
  int ref_count(BlockId id) const;

 private:
  void check_id(BlockId id) const;

  std::vector<BlockId> free_list_;  // a stack: the most recently freed block is reused first
  std::vector<int> ref_counts_;     // [num_blocks]
};

}  // namespace flashserve
