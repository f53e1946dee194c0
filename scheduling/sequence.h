// Sequence: the scheduler's view of one request — its tokens (prompt, then generated), how many
// of them have K/V in the cache, and the blocks holding that K/V. The engine keeps everything
// else about a request (stream, sampling parameters) beside it, keyed by id.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduling/block_allocator.h"
#include "scheduling/block_hash.h"

namespace flashserve {

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  uint64_t id = 0;                // arrival order: smaller ids arrived earlier
  std::vector<int32_t> tokens;    // [num_prompt_tokens + num_generated]
  int num_prompt_tokens = 0;
  int num_computed = 0;           // tokens 0 .. num_computed-1 have K/V in the cache
  int max_tokens = 0;             // generated tokens allowed (the engine also caps by context)
  // True until the prompt logprobs were delivered: prompt chunks then ask for every logits row.
  bool need_prompt_logprobs = false;
  // An embedding request: its last prompt chunk asks for the final-norm hidden state
  // (LogitsWanted::kHidden) instead of logits, and nothing is generated.
  bool pooled = false;
  std::vector<BlockId> block_table;  // KV blocks covering positions 0 .. num_computed-1 (+ chunk)
  // Leading block_table entries released under a sliding window (kv_window.h): each holds the
  // sentinel kDroppedBlock, and the sequence holds only the entries after them.
  int num_dropped_blocks = 0;
  SeqStatus status = SeqStatus::kWaiting;
  int num_preemptions = 0;
  // Steps in which sequences that arrived later were given prefill work ahead of this one while
  // it still had prompt to compute (short-prefill-first admission, scheduler.h); reset when
  // it is preempted.
  int num_bypassed = 0;
  // Prefix caching: the root of this request's hash chain (from its cache salt), the hashes of
  // its full token blocks so far (block_hashes[i] covers tokens[i*bs .. (i+1)*bs-1]), how many
  // leading blocks of block_table were offered to the cache, and how many prompt tokens the
  // latest admission adopted from it instead of computing them.
  BlockHash cache_root = root_hash("");
  std::vector<BlockHash> block_hashes;
  int num_published_blocks = 0;
  int num_cached_prompt_tokens = 0;
  // Speculative decoding (docs/SPECULATIVE.md): tokens guessed to follow `tokens`, set by the
  // engine before each step. A decode step verifies them: its chunk is the pending token and
  // the draft (verify_tokens holds them in a row), and Scheduler::accept_draft keeps the K/V of
  // those the target agreed with. Never part of `tokens` or of a cached block until accepted.
  std::vector<int32_t> draft;
  std::vector<int32_t> verify_tokens;  // [1 + draft tokens scheduled] while a step verifies

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_generated() const { return num_tokens() - num_prompt_tokens; }
  // Tokens still to run through the model: the rest of the prompt, all of prompt+generated after
  // a preemption, or just the last sampled token while decoding.
  int num_pending() const { return num_tokens() - num_computed; }
};

// Blocks needed to hold `num_tokens` positions.
inline int blocks_for_tokens(int num_tokens, int block_size) {
  return (num_tokens + block_size - 1) / block_size;
}

}  // namespace flashserve
