// bench_linear: the decode step's linear layers at small batch, the skinny-matmul kernel against
// cuBLASLt (the baseline, in the same run), both through the CUDA backend's matmul op.
// For each model shape's projections (fused QKV, o, fused gate/up, down, lm_head with fp32 out)
// and m rows: time = median over replays of a recorded graph of `reps` back-to-back matmuls
// (so launch gaps do not count) over weight copies that together overflow L2, bytes = w + x + out, and the ratio to the measured copy
// bandwidth. Prints one JSON line per (shape, projection, m) with speedup_vs_cublaslt and
// frac_of_copy_bw, and a `weights_per_step` line per (shape, m): all of one step's projections.
// --dtype fp8 (docs/FP8.md) adds FP8 weights through the same backend (skinny kernels up to
// m = 16, dequantize + cuBLASLt above; lm_head stays bf16 as in the model): records then carry
// dtype "fp8", its time as us, bytes = 1 per weight + 4 per row scale, and the bf16 kernel's and
// cuBLASLt's times from the same run with speedup_vs_bf16 (against the faster of the two).
// --dtype int4 (docs/QUANTIZATION.md) does the same with packed int4 weights, group 128,
// asymmetric (the int4 skinny kernel up to m = 16, the int4 GEMM above), and records the same
// weights on the cuBLASLt backend (dequantize + cuBLASLt at every m) as dequant_cublaslt_us and
// speedup_vs_dequant_cublaslt: bytes = half a byte per weight + 5 per group and row (f32 scale,
// u8 zero point).
// --dtype block-fp8 (docs/QUANTIZATION.md) the same with block-wise FP8 weights, 128x128 blocks
// (the block-FP8 skinny kernels up to m = 16, cuBLASLt's block-scaled FP8 GEMM above):
// bytes = 1 per weight + 4 per block; records also carry the per-row FP8 weights' time from the
// same run (fp8_us) and speedup_vs_fp8.
//   bench_linear [--shapes tinyllama-1.1b,llama2-7b] [--rows 1,2,4,8,16] [--reps 20]
//                [--dtype bf16|fp8|int4|block-fp8]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "bench/graph_timer.h"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "core/dtype.h"
#include "backends/backend.h"
#include "kernels/cpu/block_fp8_matmul_ref.h"
#include "weights/block_fp8_weights.h"
#include "weights/int4_weights.h"

using namespace flashserve;
using json = nlohmann::ordered_json;

namespace {

struct Proj {
  const char* name;
  int64_t n, k;
  bool f32_out;
};
struct Shape {
  const char* name;
  int layers;
  std::vector<Proj> proj;
};

std::vector<Shape> shapes() {
  // hidden, intermediate, heads as in bench/e2e_cost's presets (TinyLlama: 2048/5632, 32 q / 4
  // kv heads of 64; Llama-2-7B: 4096/11008, 32 / 32 of 128; vocab 32000).
  return {{"tinyllama-1.1b", 22,
           {{"qkv", 2048 + 2 * 256, 2048, false}, {"o", 2048, 2048, false},
            {"gate_up", 2 * 5632, 2048, false}, {"down", 2048, 5632, false},
            {"lm_head", 32000, 2048, true}}},
          {"llama2-7b", 32,
           {{"qkv", 3 * 4096, 4096, false}, {"o", 4096, 4096, false},
            {"gate_up", 2 * 11008, 4096, false}, {"down", 4096, 11008, false},
            {"lm_head", 32000, 4096, true}}}};
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  for (size_t p = 0; p < s.size();) {
    size_t e = s.find(',', p);
    if (e == std::string::npos) e = s.size();
    const std::string item = s.substr(p, e - p);
    char* end = nullptr;
    const long x = std::strtol(item.c_str(), &end, 10);
    v.push_back(item.empty() || *end ? 0 : int(x));  // 0: not a number (the --rows check refuses it)
    p = e + 1;
  }
  return v;
}

// A random int4 weight [n, k] (group 128, zero points 0..15) as the loader gives it: packed,
// its codes in compressed-tensors' words (Int4Packing::kRows), no values.
TensorView random_int4(int64_t n, int64_t k, std::mt19937& rng) {
  auto w = std::make_shared<Int4Stored>();
  w->rows = n;
  w->cols = k;
  w->group_size = 128;
  auto words = std::make_shared<std::vector<uint8_t>>(w->word_bytes());
  for (auto& b : *words) b = uint8_t(rng());
  w->words = words->data();
  w->owned = std::move(words);
  w->scales.assign(size_t(n * w->groups()), 0.05f / 8.f);
  w->zeros.resize(w->scales.size());
  for (auto& z : w->zeros) z = uint8_t(rng() % 16);
  TensorView v{DType::kI4, {n, k}, nullptr};
  v.int4 = std::move(w);
  return v;
}

// A random block-wise FP8 weight [n, k] (128x128 blocks, any non-NaN code) as the loader gives
// it: the codes and scales, and its f32 values in `values`.
TensorView random_block_fp8(int64_t n, int64_t k, std::mt19937& rng, std::vector<float>* values) {
  auto w = std::make_shared<BlockFp8Weight>();
  w->rows = n, w->cols = k, w->block_rows = 128, w->block_cols = 128;
  std::vector<uint8_t> codes(size_t(n * k));
  for (auto& c : codes) c = uint8_t(rng() % 0x7f) | uint8_t(rng() & 0x80);
  w->own_codes(std::move(codes));
  w->scales.assign(size_t((n + 127) / 128 * w->scale_cols()), 0.05f / 448.f);
  values->resize(size_t(n * k));
  ref::dequantize_block_fp8(values->data(), w->codes, w->scales.data(), int(n), int(k), 128,
                            128);
  TensorView v{DType::kF32, {n, k}, values->data()};
  v.block_fp8 = std::move(w);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_list = "tinyllama-1.1b,llama2-7b", rows_list = "1,2,4,8,16", command;
  std::string dtype = "bf16";
  int reps = 20;
  command = flashserve::cli::command_line(argc, argv);
  CLI::App app{"The decode step's projections: skinny-matmul kernel vs cuBLASLt (JSON lines).", "bench_linear"};
  app.add_option("--shapes", shape_list, "comma-separated model shapes")->capture_default_str();
  app.add_option("--rows", rows_list, "comma-separated row counts m")
      ->check(CLI::Validator(
          [](std::string& v) {
            for (int m : parse_ints(v))
              if (m < 1 || m > 4096) return std::string("each row count in [1, 4096]");
            return std::string();
          },
          "M,M,..."))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--dtype", dtype, "fp8 / int4 / block-fp8: also FP8 / int4 / block-wise FP8 "
                 "weights, against bf16 in the same run")
      ->check(CLI::IsMember({"bf16", "fp8", "int4", "block-fp8"}))->capture_default_str();
  if (const int rc = flashserve::cli::parse(app, argc, argv); rc >= 0) return rc;
  return bench::run_guarded("bench_linear", [&] {
    const bench::HwCeilings hw = bench::require_hw_ceilings();
    auto gemv = make_cuda_backend(0, 16);   // skinny-matmul kernel up to m = 16 (kGemvMaxRows)
    auto cublas = make_cuda_backend(0, 0);  // cuBLASLt always
    const bool fp8 = dtype == "fp8", int4 = dtype == "int4", block_fp8 = dtype == "block-fp8";
    const bool quant = fp8 || int4 || block_fp8;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (const Shape& s : shapes()) {
      if (shape_list.find(s.name) == std::string::npos) continue;
      for (int m : parse_ints(rows_list)) {
        // Per variant (0: bf16 skinny kernel, 1: bf16 cuBLASLt, 2: FP8 or int4 weights on
        // backend 0).
        double step_s[3] = {0, 0, 0}, step_bytes[3] = {0, 0, 0};
        for (const Proj& p : s.proj) {
          // Random data, never zeros (a GEMM on zeros runs faster than on real data); FP8: any
          // non-NaN code, scales around the bf16 weights' size.
          std::vector<uint16_t> hw_w(size_t(p.n * p.k)), hx(size_t(m) * p.k);
          for (auto& b : hw_w) b = float_to_bf16_bits(0.05f * u(rng));
          for (auto& b : hx) b = float_to_bf16_bits(u(rng));
          const bool with_quant = quant && !p.f32_out;  // lm_head stays bf16 in quantized models
          std::vector<uint8_t> codes(with_quant && (fp8 || block_fp8) ? size_t(p.n * p.k) : 0);
          for (auto& c : codes) c = uint8_t(rng() % 0x7f) | uint8_t(rng() & 0x80);
          std::vector<float> scales(size_t(p.n), 0.05f / 448.f);
          std::vector<float> block_values;
          TensorView quant_view{DType::kF8E4M3, {p.n, p.k}, codes.data(), scales.data()};
          if (with_quant && int4) quant_view = random_int4(p.n, p.k, rng);
          if (with_quant && block_fp8) quant_view = random_block_fp8(p.n, p.k, rng, &block_values);
          // Variant 3, with block-fp8: the per-row FP8 weights, for speedup_vs_fp8; with int4:
          // the int4 weights on the cuBLASLt backend, which dequantizes them for cuBLASLt.
          double sec[4] = {0, 0, 0, 0}, bytes[4];
          Backend* bes[4] = {gemv.get(), cublas.get(), gemv.get(),
                             int4 ? cublas.get() : gemv.get()};
          const double act = 2.0 * m * p.k + (p.f32_out ? 4.0 : 2.0) * m * p.n;  // x in, out
          bytes[0] = bytes[1] = 2.0 * p.n * p.k + act;
          const double blocks = double((p.n + 127) / 128) * double((p.k + 127) / 128);
          bytes[2] = int4        ? 0.5 * p.n * p.k + 5.0 * p.n * (p.k / 128) + act
                     : block_fp8 ? 1.0 * p.n * p.k + 4.0 * blocks + act
                                 : 1.0 * p.n * p.k + 4.0 * p.n + act;
          bytes[3] = int4 ? bytes[2] : 1.0 * p.n * p.k + 4.0 * p.n + act;
          for (int b = 0; b < (with_quant ? (block_fp8 || int4 ? 4 : 3) : 2); ++b) {
            const int copies = int(std::min(64.0, std::ceil(256e6 / (bytes[b] - act))));
            std::vector<Buffer> ws;
            for (int c = 0; c < copies; ++c) {
              if (b >= 2) {
                ws.push_back(bes[b]->load_weight(
                    b == 2 || int4 ? quant_view
                           : TensorView{DType::kF8E4M3, {p.n, p.k}, codes.data(), scales.data()}));
                continue;
              }
              ws.push_back(bes[b]->allocate(DType::kBF16, {p.n, p.k}));
              bes[b]->copy_from_host(ws.back().tensor, hw_w.data());
            }
            Buffer x = bes[b]->allocate(DType::kBF16, {m, p.k});
            Buffer o = bes[b]->allocate(p.f32_out ? DType::kF32 : DType::kBF16, {m, p.n});
            bes[b]->copy_from_host(x.tensor, hx.data());
            // Cycling through the copies (together larger than the L2 cache) makes w come from
            // HBM as in a real step, where ~2 GB of weights pass between two uses of a matrix.
            sec[b] = bench::time_in_graph(
                *bes[b], [&](int i) { bes[b]->matmul(o.tensor, x.tensor, ws[i % ws.size()].tensor); },
                std::max(reps, copies));
          }
          const int times = p.f32_out ? 1 : s.layers;
          const int main = with_quant ? 2 : 0;  // the record's own variant
          for (int b = 0; b < 3; ++b) {
            const int v = b == 2 && !with_quant ? 0 : b;  // lm_head: bf16 in the quantized step too
            step_s[b] += times * sec[v];
            step_bytes[b] += times * bytes[v];
          }
          json j = bench::record_head("linear", hw.gpu, command, s.name, m);
          j["proj"] = p.name;
          j["dtype"] = with_quant ? dtype : "bf16";
          j["n"] = p.n;
          j["k"] = p.k;
          j["us"] = sec[main] * 1e6;
          if (with_quant) j["bf16_us"] = sec[0] * 1e6;
          j["cublaslt_us"] = sec[1] * 1e6;
          j["gb_s"] = bytes[main] / sec[main] / 1e9;
          j["cublaslt_gb_s"] = bytes[1] / sec[1] / 1e9;
          j["copy_gb_s"] = hw.copy_bytes_per_s / 1e9;
          j["speedup_vs_cublaslt"] = sec[1] / sec[main];
          if (with_quant) j["speedup_vs_bf16"] = std::min(sec[0], sec[1]) / sec[main];
          if (with_quant && block_fp8) {
            j["fp8_us"] = sec[3] * 1e6;
            j["speedup_vs_fp8"] = sec[3] / sec[main];
          }
          if (with_quant && int4) {
            j["dequant_cublaslt_us"] = sec[3] * 1e6;
            j["speedup_vs_dequant_cublaslt"] = sec[3] / sec[main];
          }
          j["frac_of_copy_bw"] = bytes[main] / sec[main] / hw.copy_bytes_per_s;
          bench::print_record(j);
        }
        json j = bench::record_head("linear_weights_per_step", hw.gpu, command, s.name, m);
        const int main = quant ? 2 : 0;
        j["dtype"] = dtype;
        j["ms"] = step_s[main] * 1e3;
        if (quant) j["bf16_ms"] = step_s[0] * 1e3;
        j["cublaslt_ms"] = step_s[1] * 1e3;
        j["speedup_vs_cublaslt"] = step_s[1] / step_s[main];
        if (quant) j["speedup_vs_bf16"] = std::min(step_s[0], step_s[1]) / step_s[main];
        j["frac_of_copy_bw"] = step_bytes[main] / step_s[main] / hw.copy_bytes_per_s;
        j["cublaslt_frac_of_copy_bw"] = step_bytes[1] / step_s[1] / hw.copy_bytes_per_s;
        bench::print_record(j);
      }
    }
  });
}
