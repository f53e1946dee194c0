// sampling/: turns a row of logits and a request's parameters into one token, and decides where
// that happens (argmax, GPU sampler or this host sampler).
//
// The host sampler: one row of raw logits + a request's SamplingParams and token history -> one
// SampledToken. Pure C++ on host memory; the random draw is Philox keyed by (params.seed, step),
// so a request's tokens never depend on what shares its batch. Stateless and thread-safe.
//
// Order of operations (as vLLM): logit_bias, then repetition penalty (tokens of prompt +
// generated), then frequency/presence penalties (generated tokens), then temperature (0 =
// greedy argmax, ties to the lowest id), then top-k, top-p over the renormalised survivors, then
// min-p (relative to the most likely token), then one inverse-CDF draw over the survivors.
// Logprobs are always the log-softmax of the RAW logits (before any of the above).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampling.h"

namespace flashserve {

struct SampleInput {
  const float* logits = nullptr;  // [vocab_size] raw logits of the position
  int vocab_size = 0;
  std::span<const int32_t> prompt;     // the request's prompt ids (repetition penalty)
  std::span<const int32_t> generated;  // ids generated so far (all penalties)
  uint64_t step = 0;                   // index of the token being sampled (0 = first)
};

// Samples one token. Throws flashserve::Error on invalid parameters or a NaN logit.
SampledToken sample_token(const SampleInput& input, const SamplingParams& params);

// A row for a backend to sample where its logits live (Backend::sample_rows): SampleInput
// without the logits. The backend returns only the token, so params->logprobs is ignored.
struct SampleRequest {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;
  std::span<const int32_t> generated;
  uint64_t step = 0;
};

// Throws flashserve::Error unless `params` are valid for a vocabulary of `vocab_size`.
void validate_sampling(const SamplingParams& params, int vocab_size);

// True when the token is just the argmax of the raw row: greedy, no bias, no penalties.
bool argmax_is_enough(const SamplingParams& params);

// Applies logit_bias and the three penalties to `logits` in place (exposed for tests).
void apply_penalties(std::span<float> logits,  // [vocab_size]
                     std::span<const int32_t> prompt, std::span<const int32_t> generated,
                     const SamplingParams& params);

// log-softmax of `logits`: out[i] = logits[i] - logsumexp(logits), accumulated in double.
void log_softmax(std::span<const float> logits,  // [vocab_size]
                 std::span<float> out);          // [vocab_size]

// The logprob of `token` and the top `k` (token, logprob) pairs of the raw logits, best first,
// ties to the lowest id. Used for both sampled and prompt tokens.
SampledToken token_logprobs(std::span<const float> logits,  // [vocab_size]
                            int32_t token, int k);

}  // namespace flashserve
