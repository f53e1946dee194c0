// bench_megakernel_timeline: where a megakernel decode step's time goes. Builds a model shape's
// weights (a constant bf16 pattern: the kernel's speed does not depend on the values) and a
// paged KV cache of kv_len tokens per sequence on the GPU, times `steps` launches of one decode
// step (CUDA events), and compares the weight + KV bytes per step with the measured copy
// bandwidth (frac_of_roofline). Then one launch with the kernel's trace on: per op, the cycles
// every SM spent waiting on the op's dependency, waiting for weight pages, and computing, as
// microseconds per SM at the reported SM clock. JSON lines (docs/MEGAKERNEL.md).
//   bench_megakernel_timeline [--shape tinyllama-1.1b|llama3.2-1b|qwen3-0.6b|llama2-7b]
//                             [--batch 1] [--kv-len 128] [--steps 200]
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "cli/cli.h"
#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "megakernel/device_decoder.h"

using namespace flashserve;
using json = nlohmann::ordered_json;

namespace {

ModelConfig shape_config(const std::string& n) {
  ModelConfig c;
  auto set = [&](int hid, int inter, int layers, int hq, int hkv, int d, int vocab) {
    c.hidden_size = hid, c.intermediate_size = inter, c.num_layers = layers;
    c.num_q_heads = hq, c.num_kv_heads = hkv, c.head_dim = d, c.vocab_size = vocab;
  };
  if (n == "llama3.2-1b") set(2048, 8192, 16, 32, 8, 64, 128256);
  else if (n == "qwen3-0.6b") set(1024, 3072, 28, 16, 8, 128, 151936), c.qk_norm = true;
  else if (n == "llama2-7b") set(4096, 11008, 32, 32, 32, 128, 32000);
  else if (n == "tinyllama-1.1b") set(2048, 5632, 22, 32, 4, 64, 32000);
  else FS_THROW("unknown shape '", n, "'");
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "tinyllama-1.1b";
  int batch = 1, kv_len = 128, steps = 200;
  const std::string command = cli::command_line(argc, argv);
  CLI::App app{"A megakernel decode step: time, roofline fraction, per-op trace (JSON lines).",
               "bench_megakernel_timeline"};
  app.add_option("--shape", shape, "model shape")->capture_default_str();
  app.add_option("--batch", batch, "sequences")->check(CLI::Range(1, kMegaMaxBatch))
      ->capture_default_str();
  app.add_option("--kv-len", kv_len, "KV tokens per sequence, this step's included")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--steps", steps, "timed launches")->check(CLI::Range(1, 10000))
      ->capture_default_str();
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  return bench::run_guarded("bench_megakernel_timeline", [&] {
    const bench::HwCeilings hw = bench::require_hw_ceilings();
    const ModelConfig c = shape_config(shape);
    auto be = make_cuda_backend(0);
    auto* stream = static_cast<cudaStream_t>(be->native_stream());
    std::vector<Buffer> keep;
    double weight_bytes = 0;
    auto weight = [&](int64_t rows, int64_t cols) {  // bf16 [rows, cols] of 0x3c3c (~0.0115)
      keep.push_back(be->allocate(DType::kBF16, {rows, cols}));
      CUDA_CHECK(cudaMemsetAsync(keep.back().tensor.data, 0x3c, size_t(rows * cols) * 2, stream));
      return static_cast<uint16_t*>(keep.back().tensor.data);
    };
    const int64_t H = c.hidden_size, I = c.intermediate_size, d = c.head_dim;
    const int64_t qkv_rows = int64_t(c.num_q_heads + 2 * c.num_kv_heads) * d;
    const int bs = 16, blocks_per_seq = (kv_len + bs - 1) / bs;
    std::vector<MegaLayerPtrs> layers;
    for (int l = 0; l < c.num_layers; ++l) {
      MegaLayerPtrs p{};
      p.input_norm = weight(1, H), p.post_norm = weight(1, H);
      p.wqkv = weight(qkv_rows, H), p.wo = weight(H, int64_t(c.num_q_heads) * d);
      p.w_gate_up = weight(2 * I, H), p.w_down = weight(H, I);
      if (c.qk_norm) p.q_norm = weight(1, d), p.k_norm = weight(1, d);
      p.k_cache = weight(int64_t(batch) * blocks_per_seq * bs, c.num_kv_heads * d);
      p.v_cache = weight(int64_t(batch) * blocks_per_seq * bs, c.num_kv_heads * d);
      layers.push_back(p);
    }
    weight_bytes = 2.0 * c.num_layers * double(qkv_rows * H + H * c.num_q_heads * d + 3 * I * H);
    const uint16_t* embed = weight(c.vocab_size, H);  // also the (tied) LM head
    weight_bytes += 2.0 * double(c.vocab_size) * double(H);
    const double kv_bytes = 2.0 * 2 * c.num_layers * double(batch) * kv_len * c.num_kv_heads * d;
    Buffer inv_freq = be->allocate(DType::kF32, {d / 2});
    std::vector<float> freq(size_t(d / 2));
    for (size_t i = 0; i < freq.size(); ++i) freq[i] = std::pow(10000.f, -2.f * float(i) / float(d));
    be->copy_from_host(inv_freq.tensor, freq.data());
    MegaDecoder dec(*be, c);
    dec.bind(layers, embed, weight(1, H), embed, inv_freq.tensor.as<float>());

    const size_t nb = size_t(batch);
    std::vector<int32_t> tokens(nb, 1), positions(nb, kv_len - 1), lens(nb, kv_len), slots(nb),
        table(nb * size_t(blocks_per_seq));
    for (int b = 0; b < batch; ++b) {
      for (int j = 0; j < blocks_per_seq; ++j) table[size_t(b * blocks_per_seq + j)] = b * blocks_per_seq + j;
      slots[size_t(b)] = (b * blocks_per_seq + (kv_len - 1) / bs) * bs + (kv_len - 1) % bs;
    }
    auto ints = [&](const std::vector<int32_t>& v) {
      keep.push_back(be->allocate(DType::kI32, {int64_t(v.size())}));
      be->copy_from_host(keep.back().tensor, v.data());
      return keep.back().tensor.as<int32_t>();
    };
    Buffer logits = be->allocate(DType::kF32, {int64_t(batch) * c.vocab_size});
    MegaStepArrays st;
    st.tokens = ints(tokens), st.positions = ints(positions), st.slots = ints(slots);
    st.kv_lens = ints(lens), st.block_table = ints(table);
    st.max_blocks_per_seq = blocks_per_seq, st.block_size = bs;
    st.logits = logits.tensor.as<float>();

    // An event between launches: the mean step and its distribution (p50/p99 of the steps).
    std::vector<cudaEvent_t> ev(size_t(steps) + 1);
    for (cudaEvent_t& e : ev) CUDA_CHECK(cudaEventCreate(&e));
    std::vector<double> step_times;
    auto time_steps = [&] {
      for (int i = 0; i < 3; ++i) dec.run(batch, st);
      CUDA_CHECK(cudaEventRecord(ev[0], stream));
      for (int i = 0; i < steps; ++i) {
        dec.run(batch, st);
        CUDA_CHECK(cudaEventRecord(ev[size_t(i) + 1], stream));
      }
      CUDA_CHECK(cudaEventSynchronize(ev[size_t(steps)]));
      step_times.clear();
      for (int i = 0; i < steps; ++i) {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, ev[size_t(i)], ev[size_t(i) + 1]));
        step_times.push_back(double(ms) * 1e3);
      }
      float ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[size_t(steps)]));
      return double(ms) * 1e3 / steps;
    };
    const double step_us = time_steps();
    const double p50_us = bench::percentile(step_times, 0.5);
    const double p99_us = bench::percentile(step_times, 0.99);

    const MegaProgram& prog = dec.lowered(batch);
    std::vector<MegaInstr> instrs;
    std::vector<int32_t> starts;
    prog.flatten(&instrs, &starts);
    // int64 fields, allocated as twice as many int32 words
    Buffer trace = be->allocate(DType::kI32, {int64_t(instrs.size()) * kMegaTraceFields * 2});
    dec.set_trace(static_cast<int64_t*>(trace.tensor.data));
    const double traced_us = time_steps();
    std::vector<int64_t> t(instrs.size() * kMegaTraceFields);
    be->copy_to_host(t.data(), trace.tensor);
    dec.set_trace(nullptr);

    int khz = 0, dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
    const double us_per_cycle = 1e3 / double(khz);

    json j = bench::record_head("megakernel_step", hw.gpu, command, shape, batch);
    j["model"] = shape;
    j["kv_len"] = kv_len;
    j["num_sms"] = prog.num_sms;
    j["instructions"] = instrs.size();
    j["step_us"] = step_us;
    j["step_us_p50"] = p50_us;
    j["step_us_p99"] = p99_us;
    j["step_us_traced"] = traced_us;
    j["weight_bytes"] = weight_bytes;
    j["kv_bytes"] = kv_bytes;
    j["copy_gb_s"] = hw.copy_bytes_per_s / 1e9;
    j["roofline_us"] = (weight_bytes + kv_bytes) / hw.copy_bytes_per_s * 1e6;
    j["frac_of_roofline"] = (weight_bytes + kv_bytes) / hw.copy_bytes_per_s / (step_us * 1e-6);
    bench::print_record(j);
    // Per op, summed over its instructions and divided by the SM count.
    const double per_sm = us_per_cycle / prog.num_sms;
    for (int op = 0; op < kMegaNumOps; ++op) {
      double wait = 0, run = 0, pages = 0, bytes = 0;
      int n = 0;
      for (size_t i = 0; i < instrs.size(); ++i) {
        if (instrs[i].op != op) continue;
        const int64_t* r = &t[i * kMegaTraceFields];
        wait += double(r[0]), run += double(r[1]), pages += double(r[2]);
        bytes += double(mega_weight_bytes(prog.dims, instrs[i]));
        ++n;
      }
      if (n == 0) continue;
      json o = bench::record_head("megakernel_op", hw.gpu, command, shape, batch);
      o["model"] = shape;
      o["op"] = mega_op_name(MegaOp(op));
      o["instructions"] = n;
      o["dependency_wait_us_per_sm"] = wait * per_sm;
      o["page_wait_us_per_sm"] = pages * per_sm;
      o["compute_us_per_sm"] = (run - pages) * per_sm;
      o["weight_bytes"] = bytes;
      o["sm_clock_mhz"] = khz / 1000;
      bench::print_record(o);
    }
  });
}
