// PrefixCache: hash index + LRU list of parked blocks (see prefix_cache.h).
#include "scheduling/prefix_cache.h"

#include "core/error.h"

namespace flashserve {

PrefixCache::PrefixCache(int num_blocks) : content_(num_blocks), lru_pos_(num_blocks, lru_.end()) {}

std::optional<BlockId> PrefixCache::find(const BlockHash& h) const {
  auto it = by_hash_.find(h);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

bool PrefixCache::insert(BlockId id, const BlockHash& h) {
  check_id(id);
  if (content_[id] || by_hash_.count(h)) return false;
  content_[id] = h;
  by_hash_.emplace(h, id);
  return true;
}

bool PrefixCache::has_content(BlockId id) const {
  check_id(id);
  return content_[id].has_value();
}

void PrefixCache::park(BlockId id) {
  check_id(id);
  FS_CHECK(content_[id], "park of block ", id, " without content");
  FS_CHECK(!is_parked(id), "block ", id, " parked twice");
  lru_pos_[id] = lru_.insert(lru_.end(), id);
}

void PrefixCache::unpark(BlockId id) {
  FS_CHECK(is_parked(id), "unpark of block ", id, " that is not parked");
  lru_.erase(lru_pos_[id]);
  lru_pos_[id] = lru_.end();
}

bool PrefixCache::is_parked(BlockId id) const {
  check_id(id);
  return lru_pos_[id] != lru_.end();
}

std::optional<BlockId> PrefixCache::evict() {
  if (lru_.empty()) return std::nullopt;
  const BlockId id = lru_.front();
  unpark(id);
  by_hash_.erase(*content_[id]);
  content_[id].reset();
  return id;
}

void PrefixCache::check_id(BlockId id) const {
  FS_CHECK(id >= 0 && id < static_cast<int>(content_.size()), "block id ", id, " outside [0, ",
           content_.size(), ")");
}

}  // namespace flashserve
