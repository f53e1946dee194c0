// Sampling parameters and the sampler. A request's random stream is a counter-based generator
// keyed by (seed, step), so its tokens never depend on what else shares the batch.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace flashserve {

struct SamplingParams {
  float temperature = 1.f;  // 0 = greedy
  float top_p = 1.f;        // (0, 1]
  int top_k = 0;            // <= 0: off
  float min_p = 0.f;        // [0, 1]
  uint64_t seed = 0;        // the engine picks one when the request gives none
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  float repetition_penalty = 1.f;                  // > 0; 1 = off
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias added to the logit)
  int logprobs = -1;        // -1: none; k >= 0: the chosen token's logprob and the top k
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.f;  // log-softmax of the raw logits (before penalties/temperature), as OpenAI;
                        // NaN when the request asked for no logprobs (params.logprobs < 0)
  std::vector<std::pair<int32_t, float>> top_logprobs;  // when params.logprobs > 0
};

}  // namespace flashserve
