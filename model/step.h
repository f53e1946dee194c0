// One engine step, described once from the scheduler to the kernels:
//   StepPlan  (here, host memory)  the scheduler's chunks — for each scheduled sequence its new
//             tokens, how many are cached, its block table, which logits it wants and how its
//             token is drawn — plus the flat arrays every layer reads, derived once by lay_out();
//   StepArgs  (backends/backend.h, device memory)  the same arrays uploaded in one copy, plus
//             the sizes a launch needs; each backend derives its kernels' arguments from it
//             (kernels/paged_attention.h's PagedAttentionArgs).
// The scheduler (scheduling/scheduler.*) fills the chunks; the ModelRunner lays the plan out and
// runs it.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampler.h"

namespace flashserve {

// kHidden: instead of the last position's logits, its final-norm hidden state (hidden_size
// floats): the pooled output of an embedding request. No lm_head row and no token for it.
enum class LogitsWanted { kNone, kLast, kAll, kHidden };

struct StepChunk {
  const int32_t* tokens = nullptr;  // [num_tokens] the new tokens of this step
  int num_tokens = 0;
  int num_cached = 0;  // tokens already in the KV cache; tokens[0] sits at position num_cached
  const std::vector<int32_t>* block_table = nullptr;  // KV blocks covering positions
                                                       // 0 .. num_cached + num_tokens - 1
  LogitsWanted logits = LogitsWanted::kLast;  // kAll: every position (prompt logprobs, echo)
  // With kLast, how the next token is drawn (sampling/sampler.h's choose_sample_path): kHost
  // returns the logits row; kArgmax and kDevice return the token instead (the argmax the forward
  // computes anyway, or the backend's sampler drawing `sample`), so the row never leaves the
  // device.
  SamplePath sample_path = SamplePath::kHost;
  SampleRequest sample;  // with kDevice (and kArgmax, unused there); its grammar mask
                         // (sample.allowed) may be set between ModelRunner::launch and finish
};

struct StepPlan {
  std::vector<StepChunk> chunks;

  // Derived from the chunks by lay_out(): one entry per new token, per sequence, per logit row.
  int num_seqs = 0;
  int max_q_len = 0;   // longest chunk (1 for a pure decode step)
  int max_kv_len = 0;
  int max_blocks_per_seq = 0;
  std::vector<int32_t> tokens;        // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens] position of each token in its sequence
  std::vector<int32_t> slot_mapping;  // [num_tokens] block * block_size + offset of its K/V
  std::vector<int32_t> cu_q_lens;     // [num_seqs + 1] prefix sums of the chunk lengths
  std::vector<int32_t> kv_lens;       // [num_seqs] cached tokens including this step's
  std::vector<int32_t> block_table;   // [num_seqs, max_blocks_per_seq], padded with -1
  // Rows through the final norm: those whose logits are wanted, and kHidden chunks' last rows
  // (whose normed hidden state is wanted instead; num_hidden_rows of them).
  std::vector<int32_t> logit_rows;    // [num_logit_rows] token rows, chunk by chunk
  std::vector<int32_t> row_chunk;     // [num_logit_rows] the chunk each logit row belongs to
  int num_hidden_rows = 0;

  // Checks the chunks against a cache of `num_blocks` blocks of `block_size` tokens and a
  // vocabulary of `vocab_size` (throws flashserve::Error) and fills the arrays above.
  void lay_out(int block_size, int num_blocks, int vocab_size);
};

}  // namespace flashserve
