// Host policy for replaying decode steps from captured graphs (CUDA graphs on the GPU backend).
// A pure decode step (one new token per sequence) is padded to a batch-size bucket, and its block
// table to a power-of-two stride, so that a few captured graphs serve every batch; a graph is
// also keyed by whatever launch configuration the backend derives from host data (e.g. the
// split-K decode plan). Plain C++: no device calls here, unit-tested on the CPU.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace flashserve {

// Batch-size buckets: 1, 2, 4, then every multiple of 8 up to max_batch (as vLLM does).
// Returns the smallest bucket >= n, or 0 when n > max_batch (the step runs eagerly).
int graph_batch_bucket(int n, int max_batch);

// Block-table stride of a graph: the next power of two >= blocks, at least 16.
int graph_table_stride(int blocks);

struct GraphKey {
  int batch = 0;         // bucketed number of sequences (= tokens)
  int table_stride = 0;  // padded max_blocks_per_seq
  uint64_t launch = 0;   // the backend's launch-configuration key for this step
  bool operator<(const GraphKey& o) const {
    return std::tie(batch, table_stride, launch) < std::tie(o.batch, o.table_stride, o.launch);
  }
};

// Captured graphs by key. A graph points at device buffers by address, so every graph is dropped
// when the buffers it was captured over were reallocated: `epoch` names that set of buffers
// (the caller bumps it on any reallocation). Bounded: the oldest graph goes first.
class GraphCache {
 public:
  explicit GraphCache(size_t capacity = 64) : capacity_(capacity) {}
  // The graph for `key` captured at `epoch`, or null (a miss drops stale graphs first).
  std::shared_ptr<void> find(const GraphKey& key, uint64_t epoch);
  void insert(const GraphKey& key, uint64_t epoch, std::shared_ptr<void> graph);
  size_t size() const { return graphs_.size(); }
  uint64_t captures() const { return captures_; }  // graphs inserted so far

 private:
  size_t capacity_;
  uint64_t epoch_ = 0;
  std::map<GraphKey, std::shared_ptr<void>> graphs_;
  std::vector<GraphKey> order_;  // insertion order, for eviction
  uint64_t captures_ = 0;
};

}  // namespace flashserve
