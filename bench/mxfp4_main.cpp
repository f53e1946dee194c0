// bench_mxfp4: the MXFP4 kernels (kernels/mxfp4.h) on gpt-oss's expert shapes (hidden 2880,
// intermediate 2880: gate_up [5760, 2880], down [2880, 2880]), each beside its ceiling measured
// in the same run:
//  - "gemv": the skinny product of m = 1, 2, 4, 8 rows with one expert, and "gemv_pairs": a
//    decode step's gate_up (clamped SwiGLU fused) and down for m tokens of top-4 pairs over 32
//    experts (gpt-oss-20b's decode layer): bytes = the distinct experts' weights + scales + the
//    activations, frac_of_copy_bw = bytes / time over the device-to-device copy bandwidth;
//  - "gemm": m = 128, 512, 2048 rows of one expert against the cuBLASLt bf16 GEMM of the same
//    shape (frac_of_dense_gemm; bf16 weights are 3.8x the bytes, so a fraction above 1 is
//    possible where a GEMM is bandwidth-bound).
// Records (JSON lines): time_us_p50/p10/p90 over --iters runs with L2 flushed before each.
//   bench_mxfp4 [--rows 1,2,4,8] [--gemm-rows 128,512,2048] [--iters 50]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.cuh"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "cli/cli.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/mxfp4.h"

using namespace flashserve;

namespace {

constexpr int kHidden = 2880, kInter = 2880, kExperts = 32, kTopK = 4;

// Device bytes filled with random values (codes, scales around 2^-7, bf16 inputs near 1).
void* random_device(size_t bytes, uint8_t lo, uint8_t hi, std::mt19937& rng) {
  std::vector<uint8_t> h(bytes);
  for (uint8_t& b : h) b = uint8_t(lo + rng() % (unsigned(hi - lo) + 1));
  void* d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, std::max<size_t>(bytes, 1)));
  CUDA_CHECK(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice));
  return d;
}

cuda::Mxfp4Weights weights(int groups, int rows, int cols, std::mt19937& rng) {
  const size_t values = size_t(groups) * rows * cols;
  return {static_cast<const uint8_t*>(random_device(values / 2, 0, 255, rng)),
          static_cast<const uint8_t*>(random_device(values / 32, 118, 122, rng)),
          static_cast<const float*>(random_device(size_t(groups) * rows * 4, 0, 0, rng)), groups,
          rows, cols};
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> rows = {1, 2, 4, 8}, gemm_rows = {128, 512, 2048};
  int iters = 50;
  CLI::App app{"The MXFP4 GEMV and GEMM on gpt-oss's expert shapes, beside their ceilings.",
               "bench_mxfp4"};
  app.add_option("--rows", rows, "GEMV rows (decode tokens)")->delimiter(',')
      ->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--gemm-rows", gemm_rows, "GEMM rows")->delimiter(',')
      ->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_option("--iters", iters, "timed runs")->check(CLI::Range(1, 10000))->capture_default_str();
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  return bench::run_guarded("bench_mxfp4", [&] {
    const bench::HwCeilings hw = bench::require_hw_ceilings();
    const std::string command = cli::command_line(argc, argv);
    std::mt19937 rng(1);
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    const cuda::Mxfp4Weights gate_up = weights(kExperts, 2 * kInter, kHidden, rng);
    const cuda::Mxfp4Weights down = weights(kExperts, kHidden, kInter, rng);
    const int max_m = std::max(*std::max_element(rows.begin(), rows.end()),
                               *std::max_element(gemm_rows.begin(), gemm_rows.end()));
    void* x = random_device(size_t(max_m) * kHidden * 2, 0x30, 0x3f, rng);  // bf16 high bytes
    void* out = random_device(size_t(max_m) * kTopK * 2 * kInter * 4, 0, 0, rng);
    void* act = random_device(size_t(max_m) * kTopK * kInter * 4, 0, 0, rng);
    auto emit = [&](const char* kind, const char* proj, int m, const std::vector<double>& us,
                    nlohmann::ordered_json extra) {
      const bench::Stats s = bench::compute_stats(us);
      nlohmann::ordered_json j = bench::record_head("mxfp4", hw.gpu, command, "gpt-oss-20b", m);
      j["kernel"] = kind;
      j["projection"] = proj;
      j["weights"] = "mxfp4";
      j["time_us_p50"] = s.p50, j["time_us_p10"] = s.p10, j["time_us_p90"] = s.p90;
      for (auto& [k, v] : extra.items()) j[k] = v;
      bench::print_record(j);
    };
    const double expert_bytes = double(2 * kInter) * kHidden * (0.5 + 1.0 / 32);  // gate_up
    for (int m : rows) {
      const std::vector<double> us = bench::time_runs([&] {
        cuda::mxfp4_gemv(out, true, x, false, gate_up, nullptr, m, 1, nullptr, stream);
      }, stream, 10, iters);
      const double bytes = expert_bytes + double(m) * kHidden * 2 + double(m) * 2 * kInter * 4;
      emit("gemv", "gate_up", m, us,
           {{"bytes", bytes}, {"frac_of_copy_bw", bytes / (bench::compute_stats(us).p50 * 1e-6) /
                                                      hw.copy_bytes_per_s}});
      // A decode step's experts: m tokens, top 4 of 32 experts each (distinct per token).
      std::vector<int32_t> ids(size_t(m) * kTopK);
      std::set<int> used;
      for (int t = 0; t < m; ++t) {
        std::vector<int> e(kExperts);
        for (int i = 0; i < kExperts; ++i) e[size_t(i)] = i;
        std::shuffle(e.begin(), e.end(), rng);
        for (int j = 0; j < kTopK; ++j) {
          ids[size_t(t) * kTopK + j] = e[size_t(j)];
          used.insert(e[size_t(j)]);
        }
      }
      int32_t* dids = nullptr;
      CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&dids), ids.size() * 4));
      CUDA_CHECK(cudaMemcpy(dids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
      const cuda::SwigluClamp clamp;
      const std::vector<double> pair_us = bench::time_runs([&] {
        cuda::mxfp4_gemv(act, true, x, false, gate_up, dids, m * kTopK, kTopK, &clamp, stream);
        cuda::mxfp4_gemv(out, true, act, true, down, dids, m * kTopK, 1, nullptr, stream);
      }, stream, 10, iters);
      const double pair_bytes = double(used.size()) * 1.5 * expert_bytes +
                                double(m) * kHidden * 2 + double(m) * kTopK * (kInter + kHidden) * 8;
      emit("gemv_pairs", "gate_up+down", m, pair_us,
           {{"experts", kExperts}, {"top_k", kTopK}, {"distinct_experts", used.size()},
            {"bytes", pair_bytes},
            {"frac_of_copy_bw", pair_bytes / (bench::compute_stats(pair_us).p50 * 1e-6) /
                                    hw.copy_bytes_per_s}});
      CUDA_CHECK(cudaFree(dids));
    }
    cuda::Mxfp4Weights expert0 = gate_up;  // the first expert alone (no offsets: one group)
    expert0.groups = 1;
    for (int m : gemm_rows) {
      const std::vector<double> us = bench::time_runs([&] {
        cuda::mxfp4_gemm(out, x, expert0, nullptr, m, stream);
      }, stream, 5, iters);
      const double flops = 2.0 * m * 2 * kInter * kHidden;
      const double dense = bench::measure_bf16_gemm(m, 2 * kInter, kHidden);
      const double rate = flops / (bench::compute_stats(us).p50 * 1e-6);
      emit("gemm", "gate_up", m, us,
           {{"tflops", rate / 1e12}, {"dense_bf16_tflops", dense / 1e12},
            {"frac_of_dense_gemm", rate / dense},
            {"frac_of_bf16_matmul", rate / hw.bf16_flops_per_s}});
    }
  });
}
