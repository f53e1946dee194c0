// What the GPU sampler (kernels/cuda/sampling.cu) reads for each row it samples: plain structs
// that the host packs (sampling/sample_pack.*) and uploads in one copy. C++17-clean: the .cu
// includes it. The algorithm is the host sampler's (sampling/sampler.h), step for step.
#pragma once

#include <cstdint>

namespace flashserve {

// One distinct token that a row's logit_bias or history touches. The kernel applies, per token
// and in this order, as apply_penalties() does: its biases (request order), the repetition
// penalty if seen, then frequency * count + presence if count > 0. Distinct tokens never
// share an entry, so threads can apply entries in parallel.
struct TokenEdit {
  int32_t token = 0;
  int32_t count = 0;       // times generated so far (frequency / presence penalties)
  int32_t seen = 0;        // 1 when in the prompt or generated (repetition penalty)
  int32_t bias_begin = 0;  // [bias_begin, bias_end) into the pack's bias values
  int32_t bias_end = 0;
};

struct SampleRowArgs {
  int64_t logits_row = 0;        // row of the logits tensor to sample
  uint64_t seed = 0;             // Philox key (SamplingParams::seed)
  uint64_t step = 0;             // Philox counter (the index of the token being sampled)
  double inv_temperature = 0.0;  // 1 / temperature, computed on the host as the CPU does
  double mass_scale = 0.0;       // probabilities (<= 1) become integers p * mass_scale, so that
                                 // every sum is exact and independent of the summation order
  float temperature = 0.f;       // 0 = greedy argmax (after bias and penalties)
  float top_p = 1.f;
  float min_p = 0.f;
  int32_t top_k = 0;  // <= 0: off
  float repetition_penalty = 1.f;
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  int32_t edits_begin = 0;  // [edits_begin, edits_end) into the pack's TokenEdits
  int32_t edits_end = 0;
  // Constrained decoding: the row's allowed-token mask starts at this word of the pack's masks
  // (bit t % 32 of word t / 32: token t may be drawn; the others are -inf before the edits);
  // -1: no mask.
  int64_t mask_offset = -1;
};

}  // namespace flashserve
