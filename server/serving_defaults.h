// The engine's batch limits when the command line leaves them out (--max-num-seqs and
// --max-num-batched-tokens at 0), sized from what the model leaves of the device's memory: the
// KV cache's capacity in tokens, which is the GPU's memory less the weights, over the model's
// KV bytes per token. The rule (docs/SERVER.md#serving-defaults), printed at start-up:
//   CUDA: sequences = kv_tokens / 512, tokens per step = kv_tokens / 16, each clamped to
//         [64, 1024] and [512, 8192] (a running sequence has room for 512 tokens of KV on
//         average; a step's prefill chunk is a sixteenth of the cache at most);
//   CPU:  64 sequences and 512 tokens (the fp32 reference: a larger step only waits longer).
#pragma once

#include <cstdint>
#include <string>

namespace flashserve {

struct ServingDefaults {
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
  std::string rule;  // how they were chosen, for the start-up line
};

// `requested_*` 0: size it; > 0: the flag's value, kept. `kv_cache_tokens`: the cache's size.
ServingDefaults size_serving_defaults(bool cuda, int64_t kv_cache_tokens, int requested_seqs,
                                      int requested_tokens);

}  // namespace flashserve
