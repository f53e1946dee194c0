// Host launchers of the int4 weight-only (W4A16) kernels of kernels/cuda/int4_gemv.cu: the skinny
// matmul of decode steps over packed int4 weights, the act-order gather of the activations, and
// the dequantization to bf16 that larger steps run before the bf16 GEMM. The CPU twin is
// kernels/cpu/int4_matmul_ref.h; docs/QUANTIZATION.md has the layouts. Every launcher checks its
// launch and throws flashserve::Error. C++17-clean, so host .cpp files include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace flashserve::cuda {

// The CUDA layout of an int4 weight [n, k] (n outputs, k inputs), made once at load on the GPU
// from the checkpoint's words (kernels/int4_layout.h); int4_gpu_layout is its CPU twin, from the
// internal layout (weights/int4_weights.h):
//  - codes [n, int4_row_bytes(k)]: each row in units of 128 packed columns, 64 bytes a unit (the
//    last one padded with code 0). Byte 16 t + 4 w of unit u is word w of quad lane t: packed
//    columns c = 128 u + 32 w + 8 t + (0..7), column c + 2 s in bits 4 s..4 s+3 and column
//    c + 2 s + 1 in bits 16 + 4 s.., s = 0..3. So one 16-byte load gives a lane four words of 8
//    columns, each word two bf16 pairs per shift, in the order x's 16-byte vector holds them,
//    and the 32 columns 32 w.. of a unit, one group at group_size >= 32, feed one pair of mmas;
//  - scales f32 [groups, n] and zeros u8 [groups, n] (0..16): the 8 rows a warp's quads read
//    for one group lie side by side;
//  - perm i32 [k] (act-order): packed column j holds input column perm[j].
// Value of packed column j of row o: (code - zeros[j / group_size, o]) * scales[j / group_size, o].
int int4_row_bytes(int k);
struct Int4GpuLayout {
  std::vector<uint8_t> codes;   // [n, int4_row_bytes(k)]
  std::vector<float> scales;    // [groups, n]
  std::vector<uint8_t> zeros;   // [groups, n]
};
Int4GpuLayout int4_gpu_layout(const uint8_t* packed,  // [n, k / 2] internal: column 2i low nibble
                              const float* scales,    // [n, groups]
                              const uint8_t* zeros,   // [n, groups]
                              int n, int k, int group_size);

// out[m, n] = x[m, k] · dequant(w)ᵀ for m = 1..kInt4GemvMaxRows, x already in the weight's
// packed column order (int4_gather_columns under act-order), fp32 accumulation: each 32-column
// run's exact products (code - zero) · x summed on the tensor cores, then times its group's
// scale. Supported when int4_gemv_supported(): m in range, k a multiple of 8, group_size 32, 64,
// a multiple of 128 or k, x and out 16-byte aligned; codes, scales and zeros must be 16-byte
// aligned too (int4_gemv throws otherwise), as the layout allocates them.
constexpr int kInt4GemvMaxRows = 16;
bool int4_gemv_supported(int m, int k, int group_size, const void* x, const void* out);
void int4_gemv(void* out,             // [m, n] fp32 (out_f32) or bf16
               bool out_f32,
               const void* x,         // [m, k] bf16, packed column order
               const uint8_t* codes,  // [n, int4_row_bytes(k)]
               const float* scales,   // [groups, n]
               const uint8_t* zeros,  // [groups, n]
               int m, int n, int k, int group_size, cudaStream_t stream);

// xp[r, j] = x[r, perm[j]]: the activations in an act-order weight's column order, once per
// matmul (the kernels then read them in order).
void int4_gather_columns(void* xp,             // [m, k] bf16
                         const void* x,        // [m, k] bf16
                         const int32_t* perm,  // [k]
                         int m, int k, cudaStream_t stream);

// w[o, perm[j]] = bf16((code - zero) * scale) for every packed column j (perm null: j): the weight
// in input-column order for the bf16 GEMM of steps above kInt4GemvMaxRows rows. The f32 product
// is exact, so this equals the f32 dequantization rounded once to bf16.
void int4_dequantize_bf16(void* w,               // [n, k] bf16
                          const uint8_t* codes,  // [n, int4_row_bytes(k)]
                          const float* scales,   // [groups, n]
                          const uint8_t* zeros,  // [groups, n]
                          const int32_t* perm,   // [k] or null
                          int n, int k, int group_size, cudaStream_t stream);

}  // namespace flashserve::cuda
