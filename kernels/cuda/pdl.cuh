// Programmatic dependent launch (Hopper, sm_90a builds only; see kernel_has_pdl): a kernel launched with launch_pdl() may be scheduled
// while the previous kernel on its stream is still running, so its launch latency and whatever
// it does before pdl_wait() (index math, loads of weights) overlap the previous kernel's tail.
// A decode step is ~10 small kernels per layer, each a few microseconds, so the gaps matter.
// Rules for a kernel launched this way: call pdl_wait() before touching memory that an earlier
// kernel writes or reads (it returns once the previous grid has finished and its writes are
// visible; transitively every earlier one); call pdl_trigger() early so the next kernel can be
// scheduled in turn. Both are no-ops when the kernel was launched normally.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/cuda_check.h"

namespace flashserve::cuda {

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// True when `kernel`, as it runs on the current device, was compiled for sm_90 or newer, i.e. it
// contains the griddepcontrol instructions. Launching a kernel without them with programmatic
// serialisation would let it read its predecessor's output too early: on Ampere/Ada, and on a
// Hopper running the compute_80 PTX (JIT-compiled), kernels are launched normally. Cached per
// kernel and device.
inline bool kernel_has_pdl(const void* kernel) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, bool> known;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find({kernel, device});
  if (it == known.end()) {
    cudaFuncAttributes attrs = {};
    CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
    it = known.emplace(std::make_pair(kernel, device), attrs.ptxVersion >= 90).first;
  }
  return it->second;
}

template <class... KernelArgs, class... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = kernel_has_pdl(reinterpret_cast<const void*>(kernel)) ? 1 : 0;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...));
}

}  // namespace flashserve::cuda
