// Host launchers of the row copies (kernels/cuda/embedding_gather.cu): the embedding lookup and
// the gather of selected rows. CPU twins in kernels/cpu/embedding_gather_ref.h. Every launcher
// checks the launch and throws flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// out[i, :] = table[ids[i], :]
void embedding_bf16(void* out,             // [n, hidden] bf16
                    const int32_t* ids,    // [n]
                    const void* table,     // [vocab, hidden] bf16
                    int n, int hidden, int vocab, cudaStream_t stream);

// out[r] = x[row_ids[r]] (rows of `row_bytes` bytes).
void gather_rows(void* out, const void* x, const int32_t* row_ids, int rows, int row_bytes,
                 cudaStream_t stream);

}  // namespace flashserve::cuda
