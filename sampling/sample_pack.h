// Host side of the GPU sampler: packs a batch of SampleRequests into the flat arrays that
// kernels/cuda/sampling.cu reads (kernels/sampling_args.h). Plain C++, unit-tested on the CPU:
// applying a pack's edits the kernel's way equals apply_penalties() bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "kernels/sampling_args.h"

namespace flashserve {

struct SamplePack {
  std::vector<SampleRowArgs> rows;  // [n]
  std::vector<TokenEdit> edits;     // each row's distinct touched tokens, rows in order
  std::vector<float> biases;        // logit_bias values grouped by token, request order kept
  std::vector<uint32_t> masks;      // the masked rows' allowed-token masks, mask_words(vocab) each
};

// One SampleRowArgs per request, reading logits row logits_rows[i]. Validates each request as
// the host sampler does (throws flashserve::Error), including history ids outside the vocab.
// Linear in the requests' history lengths: it keeps a vocab-sized index between calls.
class SamplePacker {
 public:
  const SamplePack& pack(std::span<const int64_t> logits_rows,     // [n]
                         std::span<const SampleRequest> requests,  // [n]
                         int vocab_size);

 private:
  TokenEdit& edit_of(int32_t token);
  SamplePack pack_;
  std::vector<int32_t> slot_;  // [vocab] index of the token's edit in this row, or -1
};

// The same, for one call (tests).
SamplePack pack_samples(std::span<const int64_t> logits_rows,
                        std::span<const SampleRequest> requests, int vocab_size);

// The kernel's mask and edit steps on the host (for tests): row `r`'s mask and edits applied
// to `logits`.
void apply_packed_edits(std::span<float> logits,  // [vocab_size]
                        const SamplePack& pack, size_t r);

}  // namespace flashserve
