// The paged KV cache: per layer, K and V each [num_blocks, block_size, num_kv_heads, head_dim]
// in the backend's compute dtype (layout contract: kernels/paged_attention.h). Storage only:
// which blocks belong to whom is the block allocator's business (scheduling/block_allocator.*).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/backend.h"

namespace flashserve {

struct KvCacheConfig {
  int num_layers = 0;
  int num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  // Bytes of K and V for one token across all layers, in `dtype`.
  size_t bytes_per_token(DType dtype) const {
    return size_t(2) * num_layers * num_kv_heads * head_dim * dtype_size(dtype);
  }
};

class KvCache {
 public:
  // Allocates the cache on `backend`; contents start undefined (only written slots are read).
  KvCache(Backend& backend, const KvCacheConfig& config);
  const KvCacheConfig& config() const { return config_; }
  Tensor k(int layer) const;  // [num_blocks, block_size, num_kv_heads, head_dim]
  Tensor v(int layer) const;  // [num_blocks, block_size, num_kv_heads, head_dim]

 private:
  KvCacheConfig config_;
  std::vector<Buffer> k_, v_;  // [num_layers]
};

}  // namespace flashserve
