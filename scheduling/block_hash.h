// BlockHash: the identity of a full KV block's content, so that a later request can find K/V
// already computed for the same tokens at the same positions. A chain: block i's hash is
// SHA-256(hash of block i-1 || block i's token ids), and block 0's parent is a root hash made
// from the request's cache salt, so every block's hash covers the salt and every token before
// it (K/V at a position depends on all of them). SHA-256 from Nettle: two different token paths
// with one hash would need a SHA-256 collision (docs/PREFIX_CACHE.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace flashserve {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const BlockHash&) const = default;
};

// For hash tables: the digest is uniform already, so its first 8 bytes do.
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t x;
    std::memcpy(&x, h.bytes.data(), sizeof x);
    return x;
  }
};

// The parent of a chain's first block. Requests with different salts get unrelated chains.
BlockHash root_hash(std::string_view salt);

// The hash of a block holding `tokens` ([block_size] ids) whose predecessor hashed to `parent`.
BlockHash chain_hash(const BlockHash& parent, std::span<const int32_t> tokens);

// Appends to `hashes` (block i's at index i) the hashes of the full blocks of `tokens` it does not
// cover yet; a partial last block gets none.
void extend_block_hashes(const BlockHash& root, std::span<const int32_t> tokens, int block_size,
                         std::vector<BlockHash>* hashes);

}  // namespace flashserve
