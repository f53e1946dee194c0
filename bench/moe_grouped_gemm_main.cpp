// bench_moe_grouped_gemm: the MoE experts' grouped GEMM (kernels/moe_grouped_gemm.h) against
// cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, CUDA 13) on the same inputs, and against a
// dense cuBLASLt GEMM of the same FLOPs, all in the same run. Model shapes: Qwen3-30B-A3B (128
// experts, top 8, hidden 2048, expert intermediate 768), Mixtral-8x7B (8, top 2, 4096, 14336) and
// Qwen1.5-MoE-A2.7B (60, top 4, 2048, 1408; its shared expert is a dense MLP, not measured here).
// Per (shape, tokens, routing) both projections: gate_up (n = 2 intermediate, k = hidden) and down
// (n = hidden, k = intermediate) over tokens x top_k rows grouped by expert; routing "uniform"
// (top_k distinct experts per token, uniformly) or "skewed" (expert popularity falling as
// 1/rank^1.2, experts drawn without replacement by it).
// Records (one JSON line each): per projection and implementation ("flashserve" is the launcher's
// tile choice, "flashserve:<tile>" each tile this GPU runs forced - on Hopper the two wgmma tiles
// and the mma.sync kernel - "cublas_grouped" the baseline, "cublaslt_dense" the dense GEMM) with
// time_us_p50/p10/p90, tflops (useful FLOPs: 2 x rows x n x k), frac_of_dense_gemm (against the
// cuBLASLt GEMM of [rows, k] x [n, k]ᵀ measured in the same run), frac_of_bf16_matmul (the
// 8192^3 ceiling), frac_of_step_lower_bound (the larger of the FLOPs at that ceiling and the bytes
// - weights of the experts that got rows, a, out - at the copy bandwidth) and, for ours,
// speedup_vs_cublas_grouped and rel_diff_vs_cublas (relative Frobenius distance of the outputs);
// then a "gate_up+down" record per implementation that sums the two projections' times.
// cuBLAS's grouped GEMM takes the per-expert row counts on the host: a server would copy the
// offsets back and wait for them before every launch (and could not capture it in a CUDA graph);
// that copy is not in its time here.
//   bench_moe_grouped_gemm [--shapes qwen3-30b-a3b,mixtral-8x7b,qwen1.5-moe-a2.7b]
//                          [--tokens 512,2048,8192] [--routing uniform,skewed] [--iters 20]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.cuh"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "cli/cli.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/moe_grouped_gemm.h"

using namespace flashserve;
using json = nlohmann::ordered_json;

namespace {

#define CUBLAS_OK(expr)                                                              \
  do {                                                                               \
    const cublasStatus_t st_ = (expr);                                               \
    FS_CHECK(st_ == CUBLAS_STATUS_SUCCESS, #expr, " failed with status ", int(st_)); \
  } while (0)

struct ModelShape {
  const char* name;
  int experts, top_k, hidden, inter;
};
constexpr ModelShape kShapes[] = {{"qwen3-30b-a3b", 128, 8, 2048, 768},
                                  {"mixtral-8x7b", 8, 2, 4096, 14336},
                                  {"qwen1.5-moe-a2.7b", 60, 4, 2048, 1408}};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  for (size_t p = 0; p <= s.size();) {
    size_t e = s.find(',', p);
    if (e == std::string::npos) e = s.size();
    if (e > p) v.push_back(s.substr(p, e - p));
    p = e + 1;
  }
  return v;
}
bool listed(const std::string& list, const std::string& name) {
  const std::vector<std::string> v = split(list);
  return std::find(v.begin(), v.end(), name) != v.end();
}

// Rows per expert for `tokens` tokens each routed to top_k distinct experts.
std::vector<int> route(int tokens, int experts, int top_k, bool skewed, std::mt19937& rng) {
  std::vector<double> weight(size_t(experts), 1.0);
  if (skewed) {
    std::vector<int> rank(static_cast<size_t>(experts));
    std::iota(rank.begin(), rank.end(), 0);
    std::shuffle(rank.begin(), rank.end(), rng);  // which expert is the most popular: random
    for (int e = 0; e < experts; ++e) weight[size_t(e)] = 1.0 / std::pow(1.0 + rank[size_t(e)], 1.2);
  }
  std::vector<int> rows(size_t(experts), 0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> w;
  for (int t = 0; t < tokens; ++t) {
    w = weight;
    for (int j = 0; j < top_k; ++j) {
      const double sum = std::accumulate(w.begin(), w.end(), 0.0);
      double x = u(rng) * sum;
      int e = 0;
      while (e < experts - 1 && (x -= w[size_t(e)]) >= 0) ++e;
      while (w[size_t(e)] == 0) e = (e + 1) % experts;  // rounding at the end of the range
      ++rows[size_t(e)];
      w[size_t(e)] = 0;  // distinct experts per token
    }
  }
  return rows;
}

// A device buffer of `count` bf16 values, random in [-1, 1) (never zeros: a GEMM on zeros runs
// faster than on real data), filled by repeating a 32 MiB random block.
struct DevBf16 {
  uint16_t* ptr = nullptr;
  size_t count;
  DevBf16(size_t n, std::mt19937& rng) : count(n) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(n, 1) * 2));
    std::vector<uint16_t> block(std::min<size_t>(n, size_t(16) << 20));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (uint16_t& b : block) b = float_to_bf16_bits(u(rng));
    for (size_t off = 0; off < n; off += block.size())
      CUDA_CHECK(cudaMemcpy(ptr + off, block.data(), std::min(block.size(), n - off) * 2, cudaMemcpyHostToDevice));
  }
  ~DevBf16() { cudaFree(ptr); }
  DevBf16(const DevBf16&) = delete;
  DevBf16& operator=(const DevBf16&) = delete;
};

// ||x - y|| / ||y|| over two device bf16 arrays.
double rel_diff(const uint16_t* x, const uint16_t* y, size_t n) {
  std::vector<uint16_t> hx(n), hy(n);
  CUDA_CHECK(cudaMemcpy(hx.data(), x, n * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(hy.data(), y, n * 2, cudaMemcpyDeviceToHost));
  double d2 = 0, y2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double a = bf16_bits_to_float(hx[i]), b = bf16_bits_to_float(hy[i]);
    d2 += (a - b) * (a - b);
    y2 += b * b;
  }
  return y2 > 0 ? std::sqrt(d2 / y2) : std::sqrt(d2);
}

// cuBLAS's grouped GEMM over the experts that got rows: group i is expert e's
// out_e[rows_e, n] = a_e[rows_e, k] · w_e[n, k]ᵀ, in cuBLAS's column-major terms
// out_eᵀ (n x rows_e) = op_T(w_e as k x n) · a_eᵀ (k x rows_e). The per-group sizes are host arrays,
// the matrix pointers device arrays, both built once here.
class CublasGrouped {
 public:
  CublasGrouped(cublasHandle_t h, const std::vector<int>& rows, uint16_t* out, const uint16_t* a, const uint16_t* w,
                int n, int k)
      : h_(h) {
    std::vector<const void*> pa, pb;
    std::vector<void*> pc;
    int64_t off = 0;
    for (size_t e = 0; e < rows.size(); ++e) {
      if (rows[e] > 0) {
        pa.push_back(w + int64_t(e) * n * k);
        pb.push_back(a + off * k);
        pc.push_back(out + off * n);
        m_.push_back(n);
        n_.push_back(rows[e]);
      }
      off += rows[e];
    }
    groups_ = int(m_.size());
    k_.assign(size_t(groups_), k);
    lda_.assign(size_t(groups_), k);
    ldb_.assign(size_t(groups_), k);
    ldc_.assign(size_t(groups_), n);
    size_.assign(size_t(groups_), 1);
    ta_.assign(size_t(groups_), CUBLAS_OP_T);
    tb_.assign(size_t(groups_), CUBLAS_OP_N);
    alpha_.assign(size_t(groups_), 1.f);
    beta_.assign(size_t(groups_), 0.f);
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptrs_), 3 * std::max<size_t>(size_t(groups_), 1) * sizeof(void*)));
    CUDA_CHECK(cudaMemcpy(ptrs_, pa.data(), pa.size() * sizeof(void*), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(ptrs_ + groups_, pb.data(), pb.size() * sizeof(void*), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(ptrs_ + 2 * groups_, pc.data(), pc.size() * sizeof(void*), cudaMemcpyHostToDevice));
  }
  ~CublasGrouped() { cudaFree(ptrs_); }
  CublasGrouped(const CublasGrouped&) = delete;
  CublasGrouped& operator=(const CublasGrouped&) = delete;

  void run() {
    CUBLAS_OK(cublasGemmGroupedBatchedEx(h_, ta_.data(), tb_.data(), m_.data(), n_.data(), k_.data(), alpha_.data(),
                                         reinterpret_cast<const void* const*>(ptrs_), CUDA_R_16BF, lda_.data(),
                                         reinterpret_cast<const void* const*>(ptrs_ + groups_), CUDA_R_16BF,
                                         ldb_.data(), beta_.data(), ptrs_ + 2 * groups_, CUDA_R_16BF, ldc_.data(),
                                         groups_, size_.data(), CUBLAS_COMPUTE_32F));
  }

 private:
  cublasHandle_t h_;
  int groups_ = 0;
  void** ptrs_ = nullptr;  // [A pointers | B pointers | C pointers]
  std::vector<int> m_, n_, k_, lda_, ldb_, ldc_, size_;
  std::vector<cublasOperation_t> ta_, tb_;
  std::vector<float> alpha_, beta_;
};

struct Timing {
  bench::Stats st;
  double rel_diff = -1;  // against cuBLAS's output
};

}  // namespace

int main(int argc, char** argv) {
  std::string shape_list = "qwen3-30b-a3b,mixtral-8x7b,qwen1.5-moe-a2.7b", tokens_list = "512,2048,8192";
  std::string routing_list = "uniform,skewed";
  int iters = 20;
  const std::string command = cli::command_line(argc, argv);
  CLI::App app{"The MoE grouped GEMM vs cuBLAS's grouped GEMM and a dense GEMM of the same FLOPs (JSON lines).",
               "bench_moe_grouped_gemm"};
  app.add_option("--shapes", shape_list, "comma-separated model shapes")->capture_default_str();
  app.add_option("--tokens", tokens_list, "comma-separated token counts (rows = tokens x top_k)")
      ->check(CLI::Validator(
          [](std::string& v) {
            for (const std::string& t : split(v)) {
              char* end = nullptr;
              const long x = std::strtol(t.c_str(), &end, 10);
              if (*end != 0 || x < 1 || x > 65536) return std::string("each token count in [1, 65536]");
            }
            return std::string();
          },
          "T,T,..."))
      ->capture_default_str();
  app.add_option("--routing", routing_list, "comma-separated: uniform, skewed")->capture_default_str();
  app.add_option("--iters", iters, "timed runs per measurement")->check(CLI::Range(1, 10000))->capture_default_str();
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  return bench::run_guarded("bench_moe_grouped_gemm", [&] {
    const bench::HwCeilings hw = bench::require_hw_ceilings();
    cudaStream_t stream = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasHandle_t cublas = nullptr;
    CUBLAS_OK(cublasCreate(&cublas));
    CUBLAS_OK(cublasSetStream(cublas, stream));
    std::mt19937 rng(2026);
    // Ours: the launcher's choice, then each tile this GPU runs forced; then the two baselines.
    std::vector<cuda::MoeGemmTile> tiles{cuda::MoeGemmTile::kAuto};
    if (cuda::moe_grouped_gemm_auto_tile(8, 4096) != cuda::MoeGemmTile::k128x128Mma)
      tiles.insert(tiles.end(), {cuda::MoeGemmTile::k128x256, cuda::MoeGemmTile::k64x256});
    tiles.push_back(cuda::MoeGemmTile::k128x128Mma);
    const int ours = int(tiles.size()), kGrouped = ours, kDense = ours + 1, impls = ours + 2;
    std::vector<std::string> impl_names;
    for (cuda::MoeGemmTile tile : tiles)
      impl_names.push_back(tile == cuda::MoeGemmTile::kAuto ? std::string("flashserve")
                                                             : std::string("flashserve:") + cuda::moe_gemm_tile_name(tile));
    impl_names.push_back("cublas_grouped");
    impl_names.push_back("cublaslt_dense");
    for (const ModelShape& s : kShapes) {
      if (!listed(shape_list, s.name)) continue;
      for (const std::string& tok : split(tokens_list)) {
        const int tokens = std::stoi(tok);
        for (const std::string& routing : {std::string("uniform"), std::string("skewed")}) {
          if (!listed(routing_list, routing)) continue;
          const std::vector<int> rows = route(tokens, s.experts, s.top_k, routing == "skewed", rng);
          const int total = tokens * s.top_k;
          std::vector<int32_t> offsets(size_t(s.experts) + 1, 0);
          for (int e = 0; e < s.experts; ++e) offsets[size_t(e) + 1] = offsets[size_t(e)] + rows[size_t(e)];
          const int active = int(std::count_if(rows.begin(), rows.end(), [](int r) { return r > 0; }));
          const int max_expert_rows = *std::max_element(rows.begin(), rows.end());
          int32_t* d_offsets = nullptr;
          CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_offsets), offsets.size() * sizeof(int32_t)));
          CUDA_CHECK(cudaMemcpy(d_offsets, offsets.data(), offsets.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
          // Per implementation: the two projections' times.
          std::vector<double> layer_us(static_cast<size_t>(impls), 0.0);
          double layer_flops = 0, layer_bytes = 0;
          for (const char* proj : {"gate_up", "down"}) {
            const bool gate_up = std::strcmp(proj, "gate_up") == 0;
            const int n = gate_up ? 2 * s.inter : s.hidden, k = gate_up ? s.hidden : s.inter;
            const double flops = 2.0 * total * double(n) * k;
            const double bytes = 2.0 * (double(active) * n * k + double(total) * k + double(total) * n);
            DevBf16 a(size_t(total) * k, rng), w(size_t(s.experts) * n * k, rng);
            DevBf16 out(size_t(total) * n, rng), ref_out(size_t(total) * n, rng);
            const size_t ws_bytes = cuda::moe_grouped_gemm_workspace(s.experts, n, k, total);
            void* ws = nullptr;
            if (ws_bytes > 0) CUDA_CHECK(cudaMalloc(&ws, ws_bytes));

            std::vector<Timing> t(static_cast<size_t>(impls));
            // A baseline that cuBLAS refuses leaves its records' times null, not the run failed.
            std::string grouped_error;
            try {
              CublasGrouped grouped(cublas, rows, ref_out.ptr, a.ptr, w.ptr, n, k);
              t[size_t(kGrouped)].st = bench::compute_stats(bench::time_runs([&] { grouped.run(); }, stream, 3, iters));
            } catch (const std::exception& e) {
              grouped_error = e.what();
              CUDA_CHECK(cudaStreamSynchronize(stream));
              bench::Stats& st = t[size_t(kGrouped)].st;
              st.p10 = st.p50 = st.p90 = std::nan("");
              std::fprintf(stderr, "cuBLAS grouped GEMM failed: %s\n", e.what());
            }
            for (int i = 0; i < ours; ++i) {
              auto fn = [&] {
                if (tiles[size_t(i)] == cuda::MoeGemmTile::kAuto)
                  cuda::moe_grouped_gemm(out.ptr, a.ptr, d_offsets, w.ptr, s.experts, n, k, total, ws, ws_bytes,
                                         stream);
                else
                  cuda::moe_grouped_gemm_tile(tiles[size_t(i)], out.ptr, a.ptr, d_offsets, w.ptr, s.experts, n, k, total,
                                              stream);
              };
              t[size_t(i)].st = bench::compute_stats(bench::time_runs(fn, stream, 3, iters));
              CUDA_CHECK(cudaStreamSynchronize(stream));
              if (grouped_error.empty()) t[size_t(i)].rel_diff = rel_diff(out.ptr, ref_out.ptr, size_t(total) * n);
            }
            const double dense_rate = bench::measure_bf16_gemm(total, n, k);
            bench::Stats& dense = t[size_t(kDense)].st;
            dense.p10 = dense.p50 = dense.p90 = flops / dense_rate * 1e6;
            const bench::Stats& grouped_st = t[size_t(kGrouped)].st;
            if (ws != nullptr) CUDA_CHECK(cudaFree(ws));

            const double lower_bound_us = std::max(flops / hw.bf16_flops_per_s, bytes / hw.copy_bytes_per_s) * 1e6;
            for (int i = 0; i < impls; ++i) {
              const bench::Stats& st = t[size_t(i)].st;
              json j = bench::record_head("moe_grouped_gemm", hw.gpu, command, s.name, tokens);
            j["weights"] = "bf16";
              j["proj"] = proj;
              j["routing"] = routing;
              j["impl"] = impl_names[size_t(i)];
              if (i == 0) j["tile"] = cuda::moe_gemm_tile_name(cuda::moe_grouped_gemm_auto_tile(s.experts, total));
              j["experts"] = s.experts;
              j["top_k"] = s.top_k;
              j["rows"] = total;
              j["active_experts"] = active;
              j["max_expert_rows"] = max_expert_rows;
              j["n"] = n;
              j["k"] = k;
              j["time_us_p50"] = st.p50;
              j["time_us_p10"] = st.p10;
              j["time_us_p90"] = st.p90;
              j["tflops"] = flops / (st.p50 * 1e-6) / 1e12;
              j["dense_gemm_tflops"] = dense_rate / 1e12;
              j["frac_of_dense_gemm"] = dense.p50 / st.p50;
              j["frac_of_bf16_matmul"] = flops / (st.p50 * 1e-6) / hw.bf16_flops_per_s;
              j["frac_of_step_lower_bound"] = lower_bound_us / st.p50;
              if (i < ours) {
                j["speedup_vs_cublas_grouped"] = grouped_st.p50 / st.p50;
                if (grouped_error.empty()) j["rel_diff_vs_cublas"] = t[size_t(i)].rel_diff;
              }
              if (i == kGrouped && !grouped_error.empty()) j["error"] = grouped_error;
              bench::print_record(j);
              layer_us[size_t(i)] += st.p50;
            }
            layer_flops += flops;
            layer_bytes += bytes;
            std::fprintf(stderr, "%s %s %d tokens %s: ours %.1f us (%.0f TFLOP/s), cuBLAS grouped %.1f us, dense %.1f us\n",
                         s.name, proj, tokens, routing.c_str(), t[0].st.p50, flops / (t[0].st.p50 * 1e-6) / 1e12,
                         grouped_st.p50, dense.p50);
          }
          const double lower_bound_us =
              std::max(layer_flops / hw.bf16_flops_per_s, layer_bytes / hw.copy_bytes_per_s) * 1e6;
          for (int i = 0; i < impls; ++i) {
            const double us = layer_us[size_t(i)];
            json j = bench::record_head("moe_grouped_gemm", hw.gpu, command, s.name, tokens);
            j["weights"] = "bf16";
            j["proj"] = "gate_up+down";
            j["routing"] = routing;
            j["impl"] = impl_names[size_t(i)];
            j["experts"] = s.experts;
            j["top_k"] = s.top_k;
            j["rows"] = total;
            j["time_us_p50"] = us;
            j["tflops"] = layer_flops / (us * 1e-6) / 1e12;
            j["frac_of_dense_gemm"] = layer_us[size_t(kDense)] / us;
            j["frac_of_bf16_matmul"] = layer_flops / (us * 1e-6) / hw.bf16_flops_per_s;
            j["frac_of_step_lower_bound"] = lower_bound_us / us;
            if (i < ours) j["speedup_vs_cublas_grouped"] = layer_us[size_t(kGrouped)] / us;
            bench::print_record(j);
          }
          CUDA_CHECK(cudaFree(d_offsets));
        }
      }
    }
    CUBLAS_OK(cublasDestroy(cublas));
    CUDA_CHECK(cudaStreamDestroy(stream));
  });
}
