// BlockHash chain over Nettle's SHA-256 (see block_hash.h).
#include "scheduling/block_hash.h"

#include <nettle/sha2.h>

#include <bit>

#include "core/error.h"

namespace flashserve {

static_assert(SHA256_DIGEST_SIZE == sizeof(BlockHash::bytes));
// Token ids are hashed as their in-memory bytes: little-endian int32 on every machine we build for.
static_assert(std::endian::native == std::endian::little);

namespace {

// Domain separation: a root can never equal a block hash (different first bytes hashed).
constexpr char kRootTag[] = "flashserve-prefix-root-v1";
constexpr char kBlockTag[] = "flashserve-prefix-block-v1";

}  // namespace

BlockHash root_hash(std::string_view salt) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, sizeof kRootTag, reinterpret_cast<const uint8_t*>(kRootTag));
  sha256_update(&ctx, salt.size(), reinterpret_cast<const uint8_t*>(salt.data()));
  BlockHash h;
  sha256_digest(&ctx, h.bytes.size(), h.bytes.data());
  return h;
}

BlockHash chain_hash(const BlockHash& parent, std::span<const int32_t> tokens) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, sizeof kBlockTag, reinterpret_cast<const uint8_t*>(kBlockTag));
  sha256_update(&ctx, parent.bytes.size(), parent.bytes.data());
  sha256_update(&ctx, tokens.size_bytes(), reinterpret_cast<const uint8_t*>(tokens.data()));
  BlockHash h;
  sha256_digest(&ctx, h.bytes.size(), h.bytes.data());
  return h;
}

void extend_block_hashes(const BlockHash& root, std::span<const int32_t> tokens, int block_size,
                         std::vector<BlockHash>* hashes) {
  FS_CHECK(block_size >= 1, "block_size = ", block_size);
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  for (size_t i = hashes->size(); i < full; ++i) {
    const BlockHash& parent = i == 0 ? root : (*hashes)[i - 1];
    hashes->push_back(chain_hash(parent, tokens.subspan(i * block_size, block_size)));
  }
}

}  // namespace flashserve
