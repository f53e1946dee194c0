// bench_moe_decode: one MoE layer's routed experts (Backend::moe_experts) and its routing
// (Backend::moe_route) on the CUDA backend at decode batch sizes, timed inside a CUDA graph as a
// decode step runs them. For each model shape, expert format and m, `reps` different routings
// (softmax top-k of random logits, one set of ids per repetition, so the experts read change from
// one call to the next as in a real step) are recorded back to back and replayed; the median
// replay time / reps is one layer's time. The bytes a call must read are the weights of the
// experts its routing selects (each once) plus the activations; frac_of_roofline is those bytes
// over the time, against the copy bandwidth measured in the same process. m up to 16 (bf16) or
// 64 (quantized experts) runs the fused decode kernels, above the grouped path
// (docs/MOE_KERNELS.md). Every expert of a layer
// holds the same random values (what is timed does not depend on them; the host builds one
// expert's).
//   bench_moe_decode [--shape all|qwen3-30b-a3b|mixtral-8x7b|qwen1.5-moe-a2.7b]
//                    [--dtype all|bf16|fp8|block-fp8|int4] [--rows 1,2,4,8,16,32,64] [--reps 20]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "bench/graph_timer.h"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "cli/cli.h"
#include "core/dtype.h"
#include "kernels/cpu/moe_ref.h"
#include "weights/block_fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/loaded_model.h"

using namespace flashserve;
using json = nlohmann::ordered_json;

namespace {

struct MoeShape {
  std::string name;
  int hidden, inter, experts, top_k;
  bool renormalize;
};

std::vector<MoeShape> shapes_named(const std::string& n) {
  const std::vector<MoeShape> all = {{"qwen3-30b-a3b", 2048, 768, 128, 8, true},
                                     {"mixtral-8x7b", 4096, 14336, 8, 2, true},
                                     {"qwen1.5-moe-a2.7b", 2048, 1408, 60, 4, false}};
  std::vector<MoeShape> out;
  for (const MoeShape& s : all)
    if (n == "all" || n == s.name) out.push_back(s);
  FS_CHECK(!out.empty(), "unknown --shape ", n);
  return out;
}

// One expert's projection [rows, cols] in `dtype`, as the loader gives it; bytes() is what a
// kernel reads of it (codes and scales).
struct HostWeight {
  TensorView view;
  std::vector<uint8_t> data;
  std::vector<float> scales;
  double bytes = 0;
};

HostWeight make_weight(const std::string& dtype, int rows, int cols, std::mt19937& rng) {
  HostWeight w;
  w.view.shape = {rows, cols};
  const size_t numel = size_t(rows) * cols;
  std::uniform_int_distribution<int> byte(0, 255);
  auto fp8_code = [&] { return uint8_t((byte(rng) & 0x80) | (byte(rng) % 0x60)); };  // |v| < 2, no NaN
  if (dtype == "bf16") {
    w.data.resize(numel * 2);
    auto* d = reinterpret_cast<uint16_t*>(w.data.data());
    std::uniform_real_distribution<float> u(-0.05f, 0.05f);
    for (size_t i = 0; i < numel; ++i) d[i] = float_to_bf16_bits(u(rng));
    w.view.dtype = DType::kBF16, w.view.data = d;
    w.bytes = double(numel) * 2;
  } else if (dtype == "fp8") {
    w.data.resize(numel);
    for (uint8_t& c : w.data) c = fp8_code();
    w.scales.assign(size_t(rows), 0.01f);
    w.view.dtype = DType::kF8E4M3, w.view.data = w.data.data(), w.view.row_scale = w.scales.data();
    w.bytes = double(numel) + 4.0 * rows;
  } else if (dtype == "block-fp8") {
    auto b = std::make_shared<BlockFp8Weight>();
    b->rows = rows, b->cols = cols, b->block_rows = 128, b->block_cols = 128;
    std::vector<uint8_t> codes(numel);
    for (uint8_t& c : codes) c = fp8_code();
    b->own_codes(std::move(codes));
    b->scales.assign(size_t(b->scale_rows() * b->scale_cols()), 0.01f);
    w.view.dtype = DType::kF32, w.view.block_fp8 = b;
    w.bytes = double(numel) + 4.0 * double(b->scales.size());
  } else if (dtype == "int4") {
    auto q = std::make_shared<Int4Stored>();
    q->packing = Int4Packing::kRows, q->rows = rows, q->cols = cols, q->group_size = 128;
    std::vector<uint8_t> words(numel / 2);
    for (uint8_t& b : words) b = uint8_t(byte(rng));
    q->owned = std::make_shared<const std::vector<uint8_t>>(std::move(words));
    q->words = q->owned->data();
    q->scales.assign(size_t(q->groups()) * rows, 0.01f);
    q->zeros.assign(q->scales.size(), 8);
    w.view.dtype = DType::kI4, w.view.int4 = q;
    w.bytes = double(numel) / 2 + 5.0 * double(q->scales.size());  // codes, f32 scale + u8 zero
  } else {
    FS_THROW("unknown --dtype ", dtype);
  }
  return w;
}

std::vector<int> parse_rows(const std::string& s) {
  std::vector<int> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma == std::string::npos ? s.size() : comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_name = "all", dtype_name_arg = "all", rows_arg = "1,2,4,8,16,32,64";
  int reps = 20;
  const std::string command = cli::command_line(argc, argv);
  CLI::App app{"One MoE layer's experts and routing at decode batch sizes, in CUDA graphs (JSON lines).",
               "bench_moe_decode"};
  app.add_option("--shape", shape_name, "model shape or all")->capture_default_str();
  app.add_option("--dtype", dtype_name_arg, "expert format: bf16, fp8, block-fp8, int4 or all")
      ->capture_default_str();
  app.add_option("--rows", rows_arg, "batch sizes (tokens per step), comma-separated")->capture_default_str();
  app.add_option("--reps", reps, "routings per timed graph")->check(CLI::Range(1, 1000))->capture_default_str();
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  return bench::run_guarded("bench_moe_decode", [&] {
    const bench::HwCeilings hw = bench::require_hw_ceilings();
    const std::vector<int> rows = parse_rows(rows_arg);
    const std::vector<std::string> dtypes =
        dtype_name_arg == "all" ? std::vector<std::string>{"bf16", "fp8", "block-fp8", "int4"}
                                : std::vector<std::string>{dtype_name_arg};
    std::mt19937 rng(5);
    for (const MoeShape& s : shapes_named(shape_name)) {
      for (const std::string& dtype : dtypes) {
        auto be = make_cuda_backend(0);
        const HostWeight gate = make_weight(dtype, s.inter, s.hidden, rng);
        const HostWeight up = make_weight(dtype, s.inter, s.hidden, rng);
        const HostWeight down = make_weight(dtype, s.hidden, s.inter, rng);
        const std::vector<TensorView> gates(size_t(s.experts), gate.view),
            ups(size_t(s.experts), up.view), downs(size_t(s.experts), down.view);
        const std::shared_ptr<MoeExperts> experts = be->load_moe_experts(gates, ups, downs);
        const double expert_bytes = gate.bytes + up.bytes + down.bytes;
        for (int m : rows) {
          // reps routings of m tokens, and the distinct experts each selects.
          std::normal_distribution<float> nd(0.f, 1.f);
          std::vector<Buffer> logits, ids, weights;
          double experts_read = 0;
          for (int r = 0; r < reps; ++r) {
            std::vector<float> l(size_t(m) * s.experts);
            for (float& v : l) v = nd(rng);
            std::vector<int32_t> id(size_t(m) * s.top_k);
            std::vector<float> w(id.size());
            ref::moe_route(id.data(), w.data(), l.data(), m, s.experts, s.top_k, s.renormalize);
            experts_read += double(std::set<int32_t>(id.begin(), id.end()).size()) / reps;
            logits.push_back(be->allocate(DType::kF32, {m, s.experts}));
            ids.push_back(be->allocate(DType::kI32, {m, s.top_k}));
            weights.push_back(be->allocate(DType::kF32, {m, s.top_k}));
            be->copy_from_host(logits.back().tensor, l.data());
            be->copy_from_host(ids.back().tensor, id.data());
            be->copy_from_host(weights.back().tensor, w.data());
          }
          Buffer x = be->allocate(DType::kBF16, {m, s.hidden});
          Buffer out = be->allocate(DType::kBF16, {m, s.hidden});
          const std::vector<uint16_t> xh(size_t(m) * s.hidden, float_to_bf16_bits(0.5f));
          be->copy_from_host(x.tensor, xh.data());
          const double us = 1e6 * bench::time_in_graph(*be, [&](int i) {
            be->moe_experts(out.tensor, x.tensor, ids[size_t(i)].tensor, weights[size_t(i)].tensor,
                            *experts);
          }, reps);
          const double bytes = experts_read * expert_bytes + 2.0 * 2 * m * s.hidden +
                               8.0 * m * s.top_k;
          json j = bench::record_head("moe_decode_layer", hw.gpu, command, s.name, m);
          j["dtype"] = dtype;
          j["weights"] = dtype == "int4" ? "int4-gptq" : dtype;  // the dense int4 GEMV's layout
          j["experts"] = s.experts;
          j["top_k"] = s.top_k;
          j["hidden"] = s.hidden;
          j["moe_intermediate"] = s.inter;
          // The path cuda_moe.cpp takes: fused up to 16 tokens (bf16) or 64 (quantized experts).
          j["path"] = m <= (dtype == "bf16" ? 16 : 64) ? "fused_decode" : "grouped";
          j["experts_read"] = experts_read;
          j["bytes_read"] = bytes;
          j["us"] = us;
          j["gb_s"] = bytes / us * 1e-3;
          j["copy_gb_s"] = hw.copy_bytes_per_s * 1e-9;
          j["frac_of_roofline"] = bytes / (us * 1e-6) / hw.copy_bytes_per_s;
          bench::print_record(j);
          if (dtype == dtypes.front()) {
            Buffer rid = be->allocate(DType::kI32, {m, s.top_k});
            Buffer rw = be->allocate(DType::kF32, {m, s.top_k});
            const double route_us = 1e6 * bench::time_in_graph(*be, [&](int i) {
              be->moe_route(rid.tensor, rw.tensor, logits[size_t(i)].tensor, s.top_k, s.renormalize);
            }, reps);
            json r = bench::record_head("moe_route", hw.gpu, command, s.name, m);
            r["experts"] = s.experts;
            r["top_k"] = s.top_k;
            r["us"] = route_us;
            bench::print_record(r);
          }
        }
      }
    }
  });
}
