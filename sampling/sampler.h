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

// One request's next token to draw: its parameters and token history. The logits row comes
// separately (host memory for sample_token, device memory for Backend::sample_rows), so the
// same request can be drawn on either side.
struct SampleRequest {
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt;     // the request's prompt ids (repetition penalty)
  std::span<const int32_t> generated;  // ids generated so far (all penalties)
  uint64_t step = 0;                   // index of the token being sampled (0 = first)
};

// Samples one token from a row of raw logits. Throws flashserve::Error on invalid parameters or
// a NaN logit. Logprobs are filled when request.params->logprobs >= 0.
SampledToken sample_token(std::span<const float> logits,  // [vocab_size] host memory
                          const SampleRequest& request);

// Where a request's token is drawn — the one place this choice is made:
//   kHost    the logits row comes back to the host and sample_token draws (logprobs wanted,
//            invalid parameters so that the host sampler fails the request alone with its
//            message, or the device path not allowed);
//   kArgmax  greedy without bias or penalties: the argmax the forward computes anyway;
//   kDevice  the backend's sampler draws where the logits are (Backend::sample_rows).
enum class SamplePath { kHost, kArgmax, kDevice };
SamplePath choose_sample_path(const SamplingParams& params, int vocab_size, bool device_allowed);

// Throws flashserve::Error unless `params` are valid for a vocabulary of `vocab_size`.
void validate_sampling(const SamplingParams& params, int vocab_size);

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
