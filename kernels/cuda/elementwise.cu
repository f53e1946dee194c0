// Elementwise kernels (kernels/elementwise.h): the SwiGLU activation (separate and fused gate/up
// inputs), GeGLU, residual and bias adds, scaling, logit soft-capping and the f32 -> bf16
// conversion of weights at load. One
// thread per element, fp32 math; the CPU twins are kernels/cpu/elementwise_ref.h.
#include <cuda_bf16.h>

#include "core/error.h"
#include "kernels/cuda/block_util.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/elementwise.h"

namespace flashserve::cuda {
namespace {

using bf16 = __nv_bfloat16;
using detail::blocks_for;

constexpr int kThreads = 256;

__global__ void swiglu_kernel(bf16* out, const bf16* gate, const bf16* up, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  const float g = __bfloat162float(gate[i]);
  out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * __bfloat162float(up[i]));
}

__global__ void swiglu_fused_kernel(bf16* out, const bf16* gate_up, int n, int inter) {
  pdl_trigger();  // launched with launch_pdl (kernels/cuda/pdl.cuh)
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * inter) return;
  const int64_t r = i / inter, c = i % inter;
  const float g = __bfloat162float(gate_up[r * 2 * inter + c]);
  const float u = __bfloat162float(gate_up[r * 2 * inter + inter + c]);
  out[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
}

// tanhf, not a fast approximation: the CPU twin's std::tanh within float rounding.
__global__ void geglu_fused_kernel(bf16* out, const bf16* gate_up, int n, int inter) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * inter) return;
  const int64_t r = i / inter, c = i % inter;
  const float g = __bfloat162float(gate_up[r * 2 * inter + c]);
  const float u = __bfloat162float(gate_up[r * 2 * inter + inter + c]);
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  out[i] = __float2bfloat16(0.5f * g * (1.f + tanhf(k * (g + 0.044715f * g * g * g))) * u);
}

__global__ void scale_kernel(bf16* x, float factor, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < numel) x[i] = __float2bfloat16(__bfloat162float(x[i]) * factor);
}

__global__ void softcap_kernel(float* x, float cap, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < numel) x[i] = cap * tanhf(x[i] / cap);
}

__global__ void add_kernel(bf16* out, const bf16* a, const bf16* b, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

// x[r, c] += bias[c], one thread per element.
__global__ void add_bias_kernel(bf16* x, const bf16* bias, int64_t numel, int width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= numel) return;
  x[i] = __float2bfloat16(__bfloat162float(x[i]) + __bfloat162float(bias[i % width]));
}

__global__ void add_bias_f32_kernel(float* x, const float* bias, int64_t numel, int width) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < numel) x[i] += bias[i % width];
}

__global__ void f32_to_bf16_kernel(bf16* dst, const float* src, int64_t numel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < numel) dst[i] = __float2bfloat16(src[i]);
}

}  // namespace

void swiglu_bf16(void* out, const void* gate, const void* up, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  swiglu_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(gate), static_cast<const bf16*>(up),
      numel);
  CUDA_CHECK_LAUNCH();
}

void swiglu_fused_bf16(void* out, const void* gate_up, int n, int inter, cudaStream_t stream) {
  const int64_t total = int64_t(n) * inter;
  if (total == 0) return;
  launch_pdl(swiglu_fused_kernel, blocks_for(total, kThreads), kThreads, 0, stream,
             static_cast<bf16*>(out), static_cast<const bf16*>(gate_up), n, inter);
  CUDA_CHECK_LAUNCH();
}

void geglu_fused_bf16(void* out, const void* gate_up, int n, int inter, cudaStream_t stream) {
  const int64_t total = int64_t(n) * inter;
  if (total == 0) return;
  geglu_fused_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(gate_up), n, inter);
  CUDA_CHECK_LAUNCH();
}

void scale_bf16(void* x, float factor, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  scale_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(static_cast<bf16*>(x),
                                                                       factor, numel);
  CUDA_CHECK_LAUNCH();
}

void softcap_f32(float* x, float cap, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  softcap_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(x, cap, numel);
  CUDA_CHECK_LAUNCH();
}

void add_bf16(void* out, const void* a, const void* b, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  add_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(out), static_cast<const bf16*>(a), static_cast<const bf16*>(b), numel);
  CUDA_CHECK_LAUNCH();
}

void add_bias_bf16(void* x, const void* bias, int n, int width, cudaStream_t stream) {
  const int64_t total = int64_t(n) * width;
  if (total == 0) return;
  add_bias_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(x), static_cast<const bf16*>(bias), total, width);
  CUDA_CHECK_LAUNCH();
}

void add_bias_f32(float* x, const float* bias, int n, int width, cudaStream_t stream) {
  const int64_t total = int64_t(n) * width;
  if (total == 0) return;
  add_bias_f32_kernel<<<blocks_for(total, kThreads), kThreads, 0, stream>>>(x, bias, total, width);
  CUDA_CHECK_LAUNCH();
}

void f32_to_bf16(void* dst, const float* src, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return;
  f32_to_bf16_kernel<<<blocks_for(numel, kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(dst), src, numel);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda
