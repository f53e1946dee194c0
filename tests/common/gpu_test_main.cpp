// main() for tests labelled `gpu`: without a CUDA device they exit 77, which ctest reports as
// SKIPPED (SKIP_RETURN_CODE), so CPU-only machines stay green without pretending to pass.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipping (exit 77)\n");
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
