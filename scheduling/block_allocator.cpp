// BlockAllocator: free list + reference counts (see block_allocator.h).
#include "scheduling/block_allocator.h"

#include "core/error.h"

namespace flashserve {

namespace {
int checked_count(int num_blocks) {
  FS_CHECK(num_blocks >= 0, "num_blocks = ", num_blocks);
  return num_blocks;
}
}  // namespace

BlockAllocator::BlockAllocator(int num_blocks) : ref_counts_(checked_count(num_blocks), 0) {
  free_list_.reserve(num_blocks);
  // Pushed in reverse so that a fresh allocator hands out 0, 1, 2, ... (easier to read in logs).
  for (int i = num_blocks - 1; i >= 0; --i) free_list_.push_back(i);
}

std::optional<BlockId> BlockAllocator::allocate() {
  if (free_list_.empty()) return std::nullopt;
  BlockId id = free_list_.back();
  free_list_.pop_back();
  ref_counts_[id] = 1;
  return id;
}

void BlockAllocator::retain(BlockId id) {
  check_id(id);
  FS_CHECK(ref_counts_[id] > 0, "retain of free block ", id);
  ++ref_counts_[id];
}

void BlockAllocator::release(BlockId id) {
  check_id(id);
  FS_CHECK(ref_counts_[id] > 0, "release of free block ", id);
  if (--ref_counts_[id] == 0) free_list_.push_back(id);
}

int BlockAllocator::ref_count(BlockId id) const {
  check_id(id);
  return ref_counts_[id];
}

void BlockAllocator::check_id(BlockId id) const {
  FS_CHECK(id >= 0 && id < num_total(), "block id ", id, " outside [0, ", num_total(), ")");
}

}  // namespace flashserve
