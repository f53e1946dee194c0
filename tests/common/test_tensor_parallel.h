// The tensor-parallel size at which the GPU model tests build their CUDA runners:
// FLASHSERVE_TEST_TENSOR_PARALLEL=N (default 1). `bench/gpu.sh tp`
// reruns the whole gpu suite with N = 2 on a machine of two or more GPUs, so every test written
// for one GPU also checks the sharded runner. The CPU backend is left alone (its own TP tests are
// test_tensor_parallel_cpu). Such a run also needs CUDA_MODULE_LOADING=EAGER in the environment
// before CUDA starts, as every program taking --tensor-parallel-size sets for itself
// (parallel/communicator.h says why); the script exports it.
#pragma once

#include <cstdlib>
#include <string>

#include "model/model_runner.h"

namespace flashserve::test {

inline int test_tensor_parallel_size() {
  const char* v = std::getenv("FLASHSERVE_TEST_TENSOR_PARALLEL");
  return v && *v ? std::atoi(v) : 1;
}

// Applies the size to options for the CUDA backend.
inline ModelRunnerOptions with_test_tensor_parallel(ModelRunnerOptions o) {
  if (o.backend == "cuda") o.tensor_parallel_size = test_tensor_parallel_size();
  return o;
}

}  // namespace flashserve::test
