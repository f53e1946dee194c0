// bench_decode_ops: where a decode step's time goes, op by op, on the CUDA backend. For one layer
// of a model shape at batch m (one new token per sequence, kv_len cached tokens each), every op
// of LlamaModel's layer loop is recorded `reps` times in a CUDA graph and replayed; the median
// replay time / reps is the op's time inside a graph, launch gap included (the way a decode step
// runs). The weights rotate over copies that overflow L2, so projections read HBM as in a step.
// Prints one JSON line per op with its microseconds, the per-step total (x layers), and the
// bytes the op must move over the copy bandwidth (frac_of_copy_bw), then the layer: the ops'
// sum and the whole layer recorded back to back (layer_in_graph_us, the overlap included).
// Then the step's other ops and the unfused forms of the layer's (embedding, norms, RoPE, K/V
// write, adds, q/k norm, gather, argmax, the generic attention kernel), each timed the same way
// and recorded with "in_layer": false. With --window W, first the layer's attention over the same
// cache with a sliding window of W against full attention, and with soft-capping (cap 50), each
// with speedup_vs_full ("decode_attention_window" records; head_dim 64/128/256, gemma3-1b's
// included, run the split-K decode kernel, other head dims the generic kernel).
//   bench_decode_ops [--shape tinyllama-1.1b|llama2-7b|llama3.2-1b|gemma3-1b] [--m 1] [--kv-len 256]
//                    [--reps 50] [--window 0]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
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
#if FS_BENCH_HAS_CUDA
#include "kernels/attention_generic.h"
#endif

using namespace flashserve;
using json = nlohmann::ordered_json;

namespace {

struct Shape {
  std::string name;
  int hidden, inter, layers, hq, hkv, d, vocab;
};

Shape shape_named(const std::string& n) {
  if (n == "llama2-7b") return {n, 4096, 11008, 32, 32, 32, 128, 32000};
  if (n == "llama3.2-1b") return {n, 2048, 8192, 16, 32, 8, 64, 32000};
  if (n == "gemma3-1b") return {n, 1152, 6912, 26, 4, 1, 256, 262144};
  return {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 64, 32000};
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape_name = "tinyllama-1.1b", command;
  int m = 1, kv_len = 256, reps = 50, window = 0;
  command = flashserve::cli::command_line(argc, argv);
  CLI::App app{"One decode layer's ops, each timed inside a CUDA graph (JSON lines).", "bench_decode_ops"};
  app.add_option("--shape", shape_name, "model shape")->capture_default_str();
  app.add_option("--m", m, "sequences in the batch")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--kv-len", kv_len, "KV tokens per sequence")->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--reps", reps, "timed repetitions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--window", window, "also time attention with this sliding window against full (0: no)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  if (const int rc = flashserve::cli::parse(app, argc, argv); rc >= 0) return rc;
  return bench::run_guarded("bench_decode_ops", [&] {
    const bench::HwCeilings hw = bench::require_hw_ceilings();
    const Shape s = shape_named(shape_name);
    auto be = make_cuda_backend(0);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto filled = [&](DType t, std::initializer_list<int64_t> shape, float scale = 1.f) {
      Buffer b = be->allocate(t, shape);
      const int64_t n = b.tensor.numel();
      if (t == DType::kBF16) {
        std::vector<uint16_t> h(static_cast<size_t>(n));
        for (auto& x : h) x = float_to_bf16_bits(scale * u(rng));
        be->copy_from_host(b.tensor, h.data());
      } else {
        std::vector<float> h(static_cast<size_t>(n));
        for (auto& x : h) x = scale * u(rng);
        be->copy_from_host(b.tensor, h.data());
      }
      return b;
    };
    const int64_t hid = s.hidden, qkv_w = int64_t(s.hq + 2 * s.hkv) * s.d;
    // Activations and weights of one layer.
    Buffer x = filled(DType::kBF16, {m, hid}), h = filled(DType::kBF16, {m, hid});
    Buffer qkv = filled(DType::kBF16, {m, qkv_w}), q = filled(DType::kBF16, {m, s.hq, s.d});
    Buffer attn = filled(DType::kBF16, {m, s.hq, s.d});
    Buffer gate_up = filled(DType::kBF16, {m, 2 * s.inter}), gate = filled(DType::kBF16, {m, s.inter});
    Buffer norm_w = filled(DType::kBF16, {hid});
    Buffer inv_freq = filled(DType::kF32, {s.d / 2}, 0.01f);
    // A paged cache holding m sequences of kv_len tokens, blocks in order.
    const int bs = 16, blocks_per_seq = (kv_len + bs - 1) / bs, num_blocks = m * blocks_per_seq;
    Buffer kc = filled(DType::kBF16, {num_blocks, bs, s.hkv, s.d});
    Buffer vc = filled(DType::kBF16, {num_blocks, bs, s.hkv, s.d});
    std::vector<int32_t> positions(m, kv_len - 1), slots(m), cu(m + 1), kv_lens(m, kv_len),
        table(size_t(m) * blocks_per_seq);
    for (int i = 0; i < m; ++i) {
      cu[i + 1] = i + 1;
      for (int b = 0; b < blocks_per_seq; ++b) table[size_t(i) * blocks_per_seq + b] = i * blocks_per_seq + b;
      slots[i] = table[size_t(i) * blocks_per_seq + (kv_len - 1) / bs] * bs + (kv_len - 1) % bs;
    }
    auto upload = [&](const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
      Buffer b = be->allocate(DType::kI32, shape);
      be->copy_from_host(b.tensor, v.data());
      return b;
    };
    Buffer pos_b = upload(positions, {m}), slot_b = upload(slots, {m}), cu_b = upload(cu, {m + 1});
    Buffer kvl_b = upload(kv_lens, {m}), table_b = upload(table, {m, blocks_per_seq});
    const StepArgs ab{.num_seqs = m, .num_tokens = m, .max_q_len = 1, .max_kv_len = kv_len, .block_size = bs,
                      .max_blocks_per_seq = blocks_per_seq, .tokens = {} /* no embedding op */,
                      .positions = pos_b.tensor, .slot_mapping = slot_b.tensor, .cu_q_lens = cu_b.tensor,
                      .kv_lens = kvl_b.tensor, .block_table = table_b.tensor, .logit_rows = {},
                      .host_kv_lens = kv_lens.data()};
    uint64_t key = 0;
    be->graph_launch_key(ab, s.hq, s.hkv, s.d, {}, &key);  // sizes the decode workspace
    if (window > 0) {
      // A windowed layer's decode (Gemma 3: window 512 in 5 of every 6 layers) against a full one
      // over the same cache, and soft-capping's cost (Gemma 2: cap 50), alone and windowed. The
      // scale is Gemma's 1/sqrt(head_dim).
      const int windows[] = {0, window};
      be->graph_launch_key(ab, s.hq, s.hkv, s.d, windows, &key);  // workspace for both plans
      const float sc = 1.f / std::sqrt(float(s.d));
      const AttentionScoring scorings[] = {{sc}, {sc, window}, {sc, 0, 50.f}, {sc, window, 50.f}};
      double full_us = 0;
      for (const AttentionScoring& a : scorings) {
        const double us = 1e6 * bench::time_in_graph(*be, [&](int) {
          be->paged_attention(attn.tensor, q.tensor, kc.tensor, vc.tensor, ab, a);
        }, reps);
        if (a.window == 0 && a.softcap == 0.f) full_us = us;
        json j = bench::record_head("decode_attention_window", hw.gpu, command, s.name, m);
        j["kv_len"] = kv_len;
        j["head_dim"] = s.d;
        j["window"] = a.window;
        j["softcap"] = a.softcap;
        j["keys_read"] = a.window > 0 ? std::min(kv_len, a.window) : kv_len;
        j["us"] = us;
        j["speedup_vs_full"] = full_us / us;
        bench::print_record(j);
      }
    }
    // The layer's weights in as many copies as it takes to overflow L2 (50 MB on an H100)
    // twice; op i uses copy i % copies, so projections stream from HBM as in a real step,
    // where ~2 GB of other weights pass between two uses of a matrix.
    const double layer_w_bytes = 2.0 * double(qkv_w * hid + hid * hid + 2 * s.inter * hid + hid * s.inter);
    const int copies = std::max(2, int(std::ceil(100e6 / layer_w_bytes)));
    struct LayerWeights {
      Buffer qkv, o, gate_up, down;
    };
    std::vector<LayerWeights> lw;
    for (int c = 0; c < copies; ++c)
      lw.push_back({filled(DType::kBF16, {qkv_w, hid}, 0.02f), filled(DType::kBF16, {hid, hid}, 0.02f),
                    filled(DType::kBF16, {2 * s.inter, hid}, 0.02f), filled(DType::kBF16, {hid, s.inter}, 0.02f)});
    Buffer x2 = filled(DType::kBF16, {m, hid}), h2 = filled(DType::kBF16, {m, hid});
    const float scale = 0.125f;

    struct Op {
      const char* name;
      std::function<void(int)> run;  // i: the weight copy to use
      double bytes;
    };
    const double act = 2.0 * m;  // bytes per activation element of the batch
    const double kv_bytes = 2.0 * m * kv_len * s.hkv * s.d * 2;
    auto w_of = [&](int i) -> const LayerWeights& { return lw[size_t(i) % lw.size()]; };
    // The ops of LlamaModel's layer loop as a decode step runs them (model/llama_model.cpp).
    std::vector<Op> ops = {
        {"add_rms_norm_matmul_qkv",
         [&](int i) {
           be->add_rms_norm_matmul(qkv.tensor, h.tensor, x2.tensor, x.tensor, h2.tensor, norm_w.tensor,
                                   1e-5f, w_of(i).qkv.tensor);
         },
         2.0 * qkv_w * hid + act * hid * 3},
        {"qkv_rope_write_kv",
         [&](int) {
           be->qkv_rope_write_kv(q.tensor, kc.tensor, vc.tensor, qkv.tensor, ab.positions,
                                 inv_freq.tensor, ab.slot_mapping);
         },
         act * qkv_w * 2},
        {"paged_attention", [&](int) { be->paged_attention(attn.tensor, q.tensor, kc.tensor, vc.tensor, ab, {.scale = scale}); },
         kv_bytes},
        {"matmul_o", [&](int i) { be->matmul(h2.tensor, attn.tensor.view({m, int64_t(s.hq) * s.d}), w_of(i).o.tensor); },
         2.0 * hid * hid},
        {"add_rms_norm_matmul_gate_up",
         [&](int i) {
           be->add_rms_norm_matmul(gate_up.tensor, h.tensor, x2.tensor, x.tensor, h2.tensor, norm_w.tensor,
                                   1e-5f, w_of(i).gate_up.tensor);
         },
         2.0 * 2 * s.inter * hid + act * hid * 3},
        {"swiglu_fused", [&](int) { be->swiglu_fused(gate.tensor, gate_up.tensor); }, act * 3 * s.inter},
        {"matmul_down", [&](int i) { be->matmul(h2.tensor, gate.tensor, w_of(i).down.tensor); },
         2.0 * hid * s.inter},
    };
    const int op_reps = std::max(reps, copies);
    double layer_us = 0, layer_bytes = 0;
    for (const Op& op : ops) {
      const double sec = bench::time_in_graph(*be, op.run, op_reps);
      layer_us += sec * 1e6;
      layer_bytes += op.bytes;
      json j = bench::record_head("decode_op", hw.gpu, command, s.name, m);
      j["kv_len"] = kv_len;
      j["op"] = op.name;
      j["us"] = sec * 1e6;
      j["us_per_step"] = sec * 1e6 * s.layers;
      j["bytes"] = op.bytes;
      j["frac_of_copy_bw"] = op.bytes / sec / hw.copy_bytes_per_s;
      bench::print_record(j);
    }
    // The whole layer as a step runs it: every op back to back in one graph, layer after layer
    // over the weight copies, so the kernels overlap as they do in a step (programmatic
    // dependent launch).
    const int layer_reps = std::max(copies, 8);
    const double layer_sec = bench::time_in_graph(
        *be, [&](int i) { for (const Op& op : ops) op.run(i); }, layer_reps);
    json j = bench::record_head("decode_layer", hw.gpu, command, s.name, m);
    j["kv_len"] = kv_len;
    j["weight_copies"] = copies;
    j["layer_us"] = layer_us;  // the ops' times one by one, summed
    j["layer_in_graph_us"] = layer_sec * 1e6;
    j["layers_ms"] = layer_sec * 1e3 * s.layers;
    j["bytes_ms_at_copy_bw"] = layer_bytes * s.layers / hw.copy_bytes_per_s * 1e3;
    j["frac_of_copy_bw"] = layer_bytes / layer_sec / hw.copy_bytes_per_s;
    bench::print_record(j);

    // The other ops of a step and the unfused forms, outside the layer sum.
    Buffer emb = filled(DType::kBF16, {s.vocab, hid}), bias = filled(DType::kBF16, {qkv_w});
    Buffer k1 = filled(DType::kBF16, {m, s.hkv, s.d}), v1 = filled(DType::kBF16, {m, s.hkv, s.d});
    Buffer qk_w = filled(DType::kBF16, {s.d}), logits = filled(DType::kF32, {m, s.vocab});
    Buffer ids = be->allocate(DType::kI32, {m});
    std::vector<int32_t> tokens(m), rows(m);
    for (int i = 0; i < m; ++i) tokens[i] = int32_t(rng() % uint32_t(s.vocab)), rows[i] = m - 1 - i;
    Buffer tok_b = upload(tokens, {m}), rows_b = upload(rows, {m});
#if FS_BENCH_HAS_CUDA
    const PagedAttentionArgs pa = paged_attention_args(ab, s.hq, s.hkv, s.d, {.scale = scale});
    auto* stream = static_cast<cudaStream_t>(be->native_stream());
#endif
    const std::vector<Op> extra = {
        {"embedding", [&](int) { be->embedding(x.tensor, tok_b.tensor, emb.tensor); }, act * hid * 2},
        {"rms_norm", [&](int) { be->rms_norm(h.tensor, x.tensor, norm_w.tensor, 1e-5f); }, act * hid * 2},
        {"add_rms_norm", [&](int) { be->add_rms_norm(h.tensor, x.tensor, h2.tensor, norm_w.tensor, 1e-5f); },
         act * hid * 4},
        {"rope", [&](int) { be->rope(q.tensor, k1.tensor, ab.positions, inv_freq.tensor); },
         act * (s.hq + s.hkv) * s.d * 2},
        {"write_kv", [&](int) { be->write_kv(kc.tensor, vc.tensor, k1.tensor, v1.tensor, ab.slot_mapping); },
         act * s.hkv * s.d * 4},
        {"swiglu", [&](int) { be->swiglu(gate.tensor, gate.tensor, gate.tensor); }, act * s.inter * 2},
        {"add", [&](int) { be->add(x.tensor, x.tensor, h.tensor); }, act * hid * 3},
        {"add_bias", [&](int) { be->add_bias(qkv.tensor, bias.tensor); }, act * qkv_w * 2},
        {"qk_norm",
         [&](int) {
           be->qk_norm(qkv.tensor.view({m, s.hq + 2 * s.hkv, s.d}), qk_w.tensor, qk_w.tensor, s.hq,
                       s.hkv, 1e-6f);
         },
         act * (s.hq + s.hkv) * s.d * 2},
        {"gather_rows", [&](int) { be->gather_rows(h2.tensor, x.tensor, rows_b.tensor); }, act * hid * 2},
        {"argmax_rows", [&](int) { be->argmax_rows(ids.tensor, logits.tensor); }, 4.0 * m * s.vocab},
#if FS_BENCH_HAS_CUDA  // the generic kernel is a CUDA launcher; the CPU backend has no such op
        {"paged_attention_generic",
         [&](int) {
           cuda::paged_attention_generic_bf16(pa, m, q.tensor.data, kc.tensor.data, vc.tensor.data, attn.tensor.data,
                                              stream, kv_len);
         },
         kv_bytes},
#endif
    };
    for (const Op& op : extra) {
      const double sec = bench::time_in_graph(*be, op.run, reps);
      json e = bench::record_head("decode_op", hw.gpu, command, s.name, m);
      e["kv_len"] = kv_len;
      e["op"] = op.name;
      e["in_layer"] = false;
      e["us"] = sec * 1e6;
      e["bytes"] = op.bytes;
      e["frac_of_copy_bw"] = op.bytes / sec / hw.copy_bytes_per_s;
      bench::print_record(e);
    }
  });
}
