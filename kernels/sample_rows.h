// Host launcher of the GPU sampler (kernels/cuda/sampling.cu): one token per logits row under the
// host sampler's rules (sampling/sampler.h), its arguments packed by sampling/sample_pack.h. The
// launcher checks the launch and throws flashserve::Error. C++17-clean.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/sampling_args.h"

namespace flashserve::cuda {

// ids[r] = the host sampler's token for logits row args[r].logits_row under args[r]
// (kernels/cuda/sampling.cu), -1 if that row holds a NaN.
void sample_rows_f32(int32_t* ids,               // [n]
                     float* work,                // [n, vocab] scratch: the penalised rows
                     uint8_t* alive,             // [n, vocab] scratch
                     const float* logits,        // [rows, vocab]
                     const SampleRowArgs* args,  // [n]
                     const TokenEdit* edits,     // [args[n-1].edits_end]
                     const float* biases,        // [edits' bias_end max]
                     const uint32_t* masks,      // [masked rows, ceil(vocab / 32)] (mask_offset)
                     int n, int vocab, cudaStream_t stream);

}  // namespace flashserve::cuda
