// CUDA_CHECK for host code: throws flashserve::Error with the CUDA error string (and file:line at debug level, core/error.h).
// Launchers call CUDA_CHECK_LAUNCH() right after every <<<>>>.
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

#define CUDA_CHECK(expr)                                                                   \
  do {                                                                                     \
    cudaError_t fs_cuda_err_ = (expr);                                                     \
    if (fs_cuda_err_ != cudaSuccess)                                                       \
      ::flashserve::throw_error(__FILE__, __LINE__, #expr, " failed: ",                    \
                                cudaGetErrorName(fs_cuda_err_), " (",                      \
                                cudaGetErrorString(fs_cuda_err_), ")");                    \
  } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
