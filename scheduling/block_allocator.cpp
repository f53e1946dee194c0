// BlockAllocator: free list + reference counts + the prefix cache's parked blocks (see
// block_allocator.h).
#include "scheduling/block_allocator.h"

#include "core/error.h"

namespace flashserve {

namespace {
int checked_count(int num_blocks) {
  FS_CHECK(num_blocks >= 0, "num_blocks = ", num_blocks);
  return num_blocks;
}
}  // namespace

BlockAllocator::BlockAllocator(int num_blocks)
    : ref_counts_(checked_count(num_blocks), 0), cache_(num_blocks) {
  free_list_.reserve(num_blocks);
  // Pushed in reverse so that a fresh allocator hands out 0, 1, 2, ... (easier to read in logs).
  for (int i = num_blocks - 1; i >= 0; --i) free_list_.push_back(i);
}

std::optional<BlockId> BlockAllocator::allocate() {
  BlockId id;
  if (!free_list_.empty()) {
    id = free_list_.back();
    free_list_.pop_back();
  } else if (auto evicted = cache_.evict()) {
    id = *evicted;
    ++num_evictions_;
  } else {
    return std::nullopt;
  }
  ref_counts_[id] = 1;
  ++num_used_;
  return id;
}

void BlockAllocator::retain(BlockId id) {
  check_id(id);
  if (ref_counts_[id] == 0) {
    FS_CHECK(cache_.is_parked(id), "retain of free block ", id);
    cache_.unpark(id);
    ++num_used_;
  }
  ++ref_counts_[id];
}

void BlockAllocator::release(BlockId id) {
  check_id(id);
  FS_CHECK(ref_counts_[id] > 0, "release of unheld block ", id);
  if (--ref_counts_[id] > 0) return;
  --num_used_;
  if (cache_.has_content(id)) {
    cache_.park(id);
  } else {
    free_list_.push_back(id);
  }
}

bool BlockAllocator::publish(BlockId id, const BlockHash& h) {
  check_id(id);
  FS_CHECK(ref_counts_[id] > 0, "publish of unheld block ", id);
  return cache_.insert(id, h);
}

int BlockAllocator::ref_count(BlockId id) const {
  check_id(id);
  return ref_counts_[id];
}

void BlockAllocator::check_consistent() const {
  const int total = num_total();
  std::vector<int> states(total, 0);  // how many states claim each block
  int used = 0;
  for (BlockId id = 0; id < total; ++id) {
    FS_CHECK(ref_counts_[id] >= 0, "block ", id, " has reference count ", ref_counts_[id]);
    if (ref_counts_[id] > 0) {
      ++used;
      ++states[id];
    }
  }
  for (BlockId id : free_list_) {
    check_id(id);
    FS_CHECK(!cache_.has_content(id), "free block ", id, " has cached content");
    ++states[id];
  }
  for (BlockId id : cache_.lru_order()) {
    FS_CHECK(cache_.has_content(id), "cached block ", id, " has no content");
    ++states[id];
  }
  for (BlockId id = 0; id < total; ++id) {
    FS_CHECK(states[id] == 1, "block ", id, " is in ", states[id], " states (reference count ",
             ref_counts_[id], ")");
  }
  FS_CHECK(used == num_used_, "used blocks: counted ", used, ", tracked ", num_used_);
  FS_CHECK(num_used() + num_free() + num_cached() == total, "used ", num_used(), " + free ",
           num_free(), " + cached ", num_cached(), " != total ", total);
}

void BlockAllocator::check_id(BlockId id) const {
  FS_CHECK(id >= 0 && id < num_total(), "block id ", id, " outside [0, ", num_total(), ")");
}

}  // namespace flashserve
