// Host launchers of RoPE and the KV-cache write (kernels/cuda/rope_kv_write.cu), separate and
// fused with the split of the qkv projection. bf16 storage, fp32 math; CPU twins in
// kernels/cpu/rope_kv_write_ref.h. Every launcher checks the launch and throws
// flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace flashserve::cuda {

// Rotate-half RoPE in place on q and k.
void rope_bf16(void* q,                   // [n, hq, d] bf16
               void* k,                   // [n, hkv, d] bf16
               const int32_t* positions,  // [n]
               const float* inv_freq,     // [d / 2]
               int n, int hq, int hkv, int d, cudaStream_t stream);

// cache[slot[t]] = k[t], v likewise (slot < 0: skipped).
void write_kv_bf16(void* k_cache, void* v_cache,  // [blocks, block_size, hkv, d] bf16
                   const void* k, const void* v,  // [n, hkv, d] bf16
                   const int32_t* slot_mapping,   // [n]
                   int n, int hkv, int d, cudaStream_t stream);

// Splits qkv rows [q | k | v], RoPE-turns q and k, writes q to `q` and k, v to the cache slots
// (slot < 0: skipped), and the turned k also to `k_rows` when given (the prefill kernel's fresh
// K rows, cuda::FreshKv; the same bf16 values the cache receives).
void qkv_rope_write_kv_bf16(void* q,                       // [n, hq, d] bf16
                            void* k_cache, void* v_cache,  // [blocks, bs, hkv, d] bf16
                            const void* qkv,               // [n, (hq + 2 hkv) d] bf16
                            const int32_t* positions,      // [n]
                            const float* inv_freq,         // [d / 2]
                            const int32_t* slot_mapping,   // [n]
                            int n, int hq, int hkv, int d, cudaStream_t stream,
                            void* k_rows = nullptr);       // [n, hkv, d] bf16 or nullptr

}  // namespace flashserve::cuda
