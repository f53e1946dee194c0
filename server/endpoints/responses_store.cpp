// ResponsesStore (see responses_store.h): a list in recency order with a map into it. Expired
// entries are dropped from the old end on every call, which keeps each call's work bounded by
// what it evicts.
#include "server/endpoints/responses_store.h"

namespace flashserve {

void ResponsesStore::remove(List::iterator it) {
  bytes_ -= it->bytes;
  index_.erase(it->id);
  lru_.erase(it);
}

void ResponsesStore::drop_expired(Clock::time_point now) {
  // Entries live from when they were stored, so the oldest by that time may sit anywhere in the
  // recency order: scan from the least recently used end, where old entries gather.
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto next = std::next(it);
    if (now - it->stored >= limits_.lifetime) remove(it);
    it = next;
  }
}

void ResponsesStore::put(const std::string& id, StoredResponse r, Clock::time_point now) {
  const size_t size = id.size() + r.response.dump().size() + r.input_items.dump().size();
  std::lock_guard<std::mutex> lock(mu_);
  drop_expired(now);
  if (auto found = index_.find(id); found != index_.end()) remove(found->second);
  if (size > limits_.max_bytes || limits_.max_entries == 0) return;
  while (!lru_.empty() &&
         (lru_.size() + 1 > limits_.max_entries || bytes_ + size > limits_.max_bytes)) {
    remove(std::prev(lru_.end()));
  }
  lru_.push_front(Entry{id, std::move(r), size, now});
  index_[id] = lru_.begin();
  bytes_ += size;
}

std::optional<StoredResponse> ResponsesStore::get(const std::string& id, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_expired(now);
  auto found = index_.find(id);
  if (found == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, found->second);  // iterators stay valid
  return found->second->value;
}

bool ResponsesStore::erase(const std::string& id, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_expired(now);
  auto found = index_.find(id);
  if (found == index_.end()) return false;
  remove(found->second);
  return true;
}

size_t ResponsesStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponsesStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace flashserve
