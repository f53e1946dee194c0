// The two hardware ceilings the end-to-end benchmarks divide by, measured in the same process:
// device-to-device copy bandwidth (cudaMemcpyAsync of 2 GiB, bytes read + written) and the dense
// bf16 matmul rate (cuBLASLt, bf16 in/out, fp32 accumulation, 8192^3). Without a CUDA build or
// device, measure_hw_ceilings() returns available = false and the benches print null ratios.
#pragma once

#include <string>

namespace flashserve::bench {

struct HwCeilings {
  bool available = false;
  std::string gpu = "none";     // the driver's device name, e.g. "NVIDIA H100 80GB HBM3"
  std::string why_unavailable;  // when !available
  double copy_bytes_per_s = 0;  // p50 over timed copies, read + write bytes
  double bf16_flops_per_s = 0;  // best p50 over the GEMM shapes tried
  std::string gemm_shape;       // "MxNxK" of that best
};

HwCeilings measure_hw_ceilings();
// The same for benchmarks that cannot run without a GPU: throws "no GPU: <why>" instead.
HwCeilings require_hw_ceilings();

// The cuBLASLt bf16 GEMM rate, FLOP/s of the p50 run, of out[m, n] = a[m, k] · w[n, k]ᵀ (bf16 in and
// out, fp32 accumulation) on the current device: the dense rate a kernel of the same FLOPs is
// measured against. Throws without a CUDA build or device.
double measure_bf16_gemm(int m, int n, int k);

// The driver's device name, or "none" / "cpu" when there is no CUDA device.
std::string gpu_name();

}  // namespace flashserve::bench
