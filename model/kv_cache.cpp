// KV cache storage: two buffers per layer allocated through the backend.
#include "model/kv_cache.h"

namespace flashserve {

KvCache::KvCache(Backend& backend, const KvCacheConfig& c) : config_(c) {
  FS_CHECK(c.num_layers > 0 && c.num_blocks > 0 && c.block_size > 0 && c.num_kv_heads > 0 &&
               c.head_dim > 0,
           "bad KV cache config: layers ", c.num_layers, " blocks ", c.num_blocks, " block_size ",
           c.block_size, " kv heads ", c.num_kv_heads, " head_dim ", c.head_dim);
  const DType t = backend.compute_dtype();
  for (int l = 0; l < c.num_layers; ++l) {
    k_.push_back(backend.allocate(t, {c.num_blocks, c.block_size, c.num_kv_heads, c.head_dim}));
    v_.push_back(backend.allocate(t, {c.num_blocks, c.block_size, c.num_kv_heads, c.head_dim}));
  }
}

Tensor KvCache::k(int layer) const {
  FS_CHECK(layer >= 0 && layer < config_.num_layers, "layer ", layer);
  return k_[layer].tensor;
}

Tensor KvCache::v(int layer) const {
  FS_CHECK(layer >= 0 && layer < config_.num_layers, "layer ", layer);
  return v_[layer].tensor;
}

}  // namespace flashserve
