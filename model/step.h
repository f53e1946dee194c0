// One engine step as the model sees it: for each scheduled sequence, a chunk of new tokens
// (a prefill chunk, or the one token sampled last step) plus where its KV lives.
// The scheduler (scheduling/scheduler.*) builds these; the ModelRunner executes them.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sampling/sampler.h"

namespace flashserve {

enum class LogitsWanted { kNone, kLast, kAll };

struct SeqChunk {
  const int32_t* tokens = nullptr;  // [num_tokens] the new tokens of this step
  int num_tokens = 0;
  int num_cached = 0;  // tokens already in the KV cache; tokens[0] sits at position num_cached
  const std::vector<int32_t>* block_table = nullptr;  // KV blocks covering positions
                                                       // 0 .. num_cached + num_tokens - 1
  LogitsWanted logits = LogitsWanted::kLast;  // kAll: every position (prompt logprobs, echo)
  // With kLast: the runner draws this row's next token where the logits are (the GPU) and
  // returns the token instead of the row, so the logits never leave the device. Greedy
  // requests without bias or penalties take the argmax the step computes anyway.
  std::optional<SampleRequest> sample;
};

struct StepBatch {
  std::vector<SeqChunk> chunks;
};

}  // namespace flashserve
