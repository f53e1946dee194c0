// size_serving_defaults (see serving_defaults.h).
#include "server/serving_defaults.h"

#include <algorithm>

namespace flashserve {

namespace {

constexpr int kCpuSeqs = 64, kCpuTokens = 512;
constexpr int64_t kKvTokensPerSeq = 512;   // KV room per running sequence, on average
constexpr int64_t kKvTokensPerStep = 16;   // a step's tokens: at most 1/16 of the cache
constexpr int kMinSeqs = 64, kMaxSeqs = 1024, kMinTokens = 512, kMaxTokens = 8192;

}  // namespace

ServingDefaults size_serving_defaults(bool cuda, int64_t kv_cache_tokens, int requested_seqs,
                                      int requested_tokens) {
  ServingDefaults d;
  if (cuda) {
    d.max_num_seqs = int(std::clamp<int64_t>(kv_cache_tokens / kKvTokensPerSeq, kMinSeqs, kMaxSeqs));
    d.max_num_batched_tokens =
        int(std::clamp<int64_t>(kv_cache_tokens / kKvTokensPerStep, kMinTokens, kMaxTokens));
    d.rule = "sized from the KV cache: sequences = kv_tokens/512 in [64, 1024], step tokens = "
             "kv_tokens/16 in [512, 8192]";
  } else {
    d.max_num_seqs = kCpuSeqs;
    d.max_num_batched_tokens = kCpuTokens;
    d.rule = "the CPU backend's 64 sequences and 512 step tokens";
  }
  if (requested_seqs > 0) d.max_num_seqs = requested_seqs;
  if (requested_tokens > 0) d.max_num_batched_tokens = requested_tokens;
  if (requested_seqs > 0 && requested_tokens > 0) d.rule = "as given";
  else if (requested_seqs > 0 || requested_tokens > 0) d.rule += ", one as given";
  return d;
}

}  // namespace flashserve
