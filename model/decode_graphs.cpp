#include "model/decode_graphs.h"

#include <algorithm>

namespace flashserve {

int graph_batch_bucket(int n, int max_batch) {
  if (n <= 0 || n > max_batch) return 0;
  int bucket = n <= 2 ? n : n <= 4 ? 4 : (n + 7) / 8 * 8;
  return std::min(bucket, max_batch);  // max_batch itself is always a bucket
}

int graph_table_stride(int blocks) {
  int s = 16;
  while (s < blocks) s *= 2;
  return s;
}

std::shared_ptr<void> GraphCache::find(const GraphKey& key, uint64_t epoch) {
  if (epoch != epoch_) {  // the buffers moved: every graph points at freed memory
    graphs_.clear();
    order_.clear();
    epoch_ = epoch;
    return nullptr;
  }
  auto it = graphs_.find(key);
  return it == graphs_.end() ? nullptr : it->second;
}

void GraphCache::insert(const GraphKey& key, uint64_t epoch, std::shared_ptr<void> graph) {
  if (epoch != epoch_) {
    graphs_.clear();
    order_.clear();
    epoch_ = epoch;
  }
  if (capacity_ == 0) return;
  if (graphs_.count(key) == 0) {
    while (graphs_.size() >= capacity_) {
      graphs_.erase(order_.front());
      order_.erase(order_.begin());
    }
    order_.push_back(key);
  }
  graphs_[key] = std::move(graph);
  ++captures_;
}

}  // namespace flashserve
