// Launcher of the skinny matmul with the residual add + RMSNorm fused in front of it
// (kernels/cuda/skinny_gemm.cuh, kAddNorm): one kernel instead of the add_rms_norm kernel and
// the projection after it. Each block norms the rows itself (the blocks do not talk), so the
// prologue is repeated per 16-row tile; it pays only while the block's first loads of w cover
// that latency (docs/DECODE.md). The CPU twin is kernels/cpu/fused_decode_ref.h.
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/gemv.h"

namespace flashserve::cuda {
namespace {

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemv_add_rms_norm_supported(int m, int k, const void* x, const void* delta, const void* x_out,
                                 const void* norm_w, const void* w, const void* out) {
  return m >= 1 && m <= kGemvMaxRows && k > 0 && k % 8 == 0 &&
         skinny::dynamic_smem(skinny::Prologue::kAddNorm, m, k) <= skinny::kMaxNormSmem &&
         aligned(x) && aligned(delta) && aligned(x_out) && aligned(norm_w) && aligned(w) &&
         aligned(out);
}

bool gemv_add_rms_norm_pays(int m, int k) {
  // The first round of loads of w (kWarps x kUnroll units of 32 columns) is in flight while the
  // prologue runs: half of a 2048-wide row, a quarter of a 4096-wide one. Measured on an H100
  // (docs/DECODE.md): TinyLlama batch-1 decode 765 / 754 tokens/s fused vs 749 unfused (two
  // rounds); offline 8x128/256 4646 fused vs 4928 unfused; Llama-2-7B's qkv / gate_up at m = 1
  // 48 / 81 us fused vs 35 + 2 / 64 + 2 us unfused.
  return m <= 2 && k <= 2 * skinny::kWarps * skinny::kUnroll * 32;
}

void gemv_add_rms_norm_bf16(void* out, bool out_f32, void* x_out, const void* x, const void* delta,
                            const void* norm_w, float eps, const void* w, int m, int n, int k,
                            cudaStream_t stream) {
  FS_CHECK(gemv_add_rms_norm_supported(m, k, x, delta, x_out, norm_w, w, out),
           "gemv_add_rms_norm: unsupported m ", m, " k ", k, " or unaligned pointers");
  FS_CHECK(x_out == nullptr || (x_out != x && x_out != delta), "gemv_add_rms_norm: x_out aliases x or delta");
  if (n == 0) return;
  skinny::Args a = skinny::make_args(out, x, w, m, n, k);
  a.delta = static_cast<const skinny::bf16*>(delta);
  a.x_out = delta != nullptr ? static_cast<skinny::bf16*>(x_out) : nullptr;
  a.norm_w = static_cast<const skinny::bf16*>(norm_w);
  a.eps = eps;
  if (out_f32)
    skinny::launch<skinny::Prologue::kAddNorm, float>(a, stream);
  else
    skinny::launch<skinny::Prologue::kAddNorm, skinny::bf16>(a, stream);
}

}  // namespace flashserve::cuda
