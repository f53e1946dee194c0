// sampling/: turns a row of logits and a request's parameters into one token, and decides where
// that happens (argmax, GPU sampler or this host sampler).
//
// The host sampler: one row of raw logits + a request's SamplingParams and token history -> one
// SampledToken. Pure C++ on host memory; the random draw is Philox keyed by (params.seed, step),
// so a request's tokens never depend on what shares its batch. Stateless and thread-safe.
//
// Order of operations (as vLLM): the grammar mask (constrained decoding: forbidden tokens become
// -inf), then logit_bias, then repetition penalty (tokens of prompt +
// generated), then frequency/presence penalties (generated tokens), then temperature (0 =
// greedy argmax, ties to the lowest id), then top-k, top-p over the renormalised survivors, then
// min-p (relative to the most likely token), then one inverse-CDF draw over the survivors.
// Logprobs are always the log-softmax of the RAW logits (before any of the above, the mask
// included: a constrained token's logprob is what the model gave it, as OpenAI reports).
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
  // Constrained decoding: bit (t % 32) of allowed[t / 32] set = token t may be drawn; the others
  // are forbidden before anything else. Null: every token may be drawn.
  const uint32_t* allowed = nullptr;   // [mask_words(vocab_size)]
};

// Words of a token mask over `vocab_size` tokens (SampleRequest::allowed).
inline size_t mask_words(int vocab_size) { return (size_t(vocab_size) + 31) / 32; }
inline bool token_allowed(const uint32_t* allowed, int32_t t) {
  return (allowed[t / 32] >> (t % 32)) & 1u;
}

// Samples one token from a row of raw logits. Throws flashserve::Error on invalid parameters or
// a NaN logit. Logprobs are filled when request.params->logprobs >= 0.
SampledToken sample_token(std::span<const float> logits,  // [vocab_size] host memory
                          const SampleRequest& request);

// Where a request's token is drawn — the one place this choice is made:
//   kHost    the logits row comes back to the host and sample_token draws (logprobs wanted,
//            invalid parameters so that the host sampler fails the request alone with its
//            message, or the device path not allowed);
//   kArgmax  greedy without bias, penalties or mask: the argmax the forward computes anyway;
//   kDevice  the backend's sampler draws where the logits are (Backend::sample_rows); a masked
//            greedy row goes here (the sampler's greedy branch is the masked argmax).
// `masked`: the row will carry SampleRequest::allowed, which the forward's argmax cannot apply.
enum class SamplePath { kHost, kArgmax, kDevice };
SamplePath choose_sample_path(const SamplingParams& params, int vocab_size, bool device_allowed,
                              bool masked = false);

// Throws flashserve::Error unless `params` are valid for a vocabulary of `vocab_size`.
void validate_sampling(const SamplingParams& params, int vocab_size);

// Sets every token that `allowed` forbids to -inf, in place (nothing when allowed is null).
void apply_token_mask(std::span<float> logits,     // [vocab_size]
                      const uint32_t* allowed);    // [mask_words(vocab_size)] or null

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
