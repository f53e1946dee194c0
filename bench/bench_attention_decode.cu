// Benchmark of split-K decode attention (kernels/attention_decode.h): effective bandwidth =
// (K and V bytes the batch needs + Q + output) / time of partial + merge, captured together in a
// CUDA graph, median of >= 50 after warm-up. L2: by default each timed run reads the next of N
// KV-cache copies, N * copy >= 3 x L2 ("rotate"); --l2 flush instead clears L2 with a memset before
// each run (bench_util.cuh), which leaves L2 full of dirty lines whose write-back is charged to the
// timed kernel (see docs/DECODE_ATTENTION.md). Also the device-to-device copy bandwidth in the
// same run (the ceiling), forced split counts and the plan under v2's tuning (min chunk 128) for
// small batches, and on the gpt-oss shape (64 q heads over 8, head_dim 64) the same plans with
// per-head sinks ("..._sinks": sinks of -1e30, which weigh exactly zero, so only the sink path's
// cost differs). One JSON line per record on stdout.
// --hold queues all timed runs behind a spin kernel (no host launch gaps inside a timed run).
// --head-dim 64|128|256 times only that head_dim's shape families (default: all).
// Usage: bench_attention_decode [--iters N] [--quick] [--l2 rotate|flush] [--hold] [--head-dim D]
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.cuh"
#include "bench/paged_batch.cuh"
#include "core/dtype.h"
#include "kernels/attention_decode.h"
#include "kernels/cuda/cuda_check.h"

namespace flashserve {
namespace {

// Deterministic pseudo-random bf16 in [-1, 1) written on the device (GBs in milliseconds).
__global__ void fill_random(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ (uint32_t(i >> 32) + seed) * 2246822519u;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    p[i] = __float2bfloat16(float(x >> 8) * (2.f / 16777216.f) - 1.f);
  }
}

void fill(void* p, size_t n, uint32_t seed) {
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  CUDA_CHECK_LAUNCH();
}

struct Shape {
  int B, L, hq, hkv, d;
};

std::string g_command, g_gpu;
double g_copy_gb_s = 0;
int g_iters = 50;
bool g_flush = false;  // --l2 flush: memset flush instead of rotating KV copies
bool g_hold = false;   // --hold: the GPU waits in a spin kernel while every timed run is enqueued
size_t g_l2_bytes = 50u << 20;

void emit(const char* impl, const Shape& s, const DecodePlan& plan, const bench::Stats& st, double bytes,
          int copies) {
  const double gb_s = bytes / (st.p50 * 1e-6) / 1e9;
  bench::JsonLine()
      .add("bench", "attention_decode")
      .add("impl", impl)
      .add("B", s.B)
      .add("kv_len", s.L)
      .add("hq", s.hq)
      .add("hkv", s.hkv)
      .add("d", s.d)
      .add("dtype", "bf16")
      .add("block_size", 16)
      .add("num_splits", plan.num_splits)
      .add("chunk_len", plan.chunk_len)
      .add("kv_heads_per_block", plan.kv_heads_per_block)
      .add("time_us_p50", st.p50)
      .add("time_us_p10", st.p10)
      .add("time_us_p90", st.p90)
      .add("iters", st.n)
      .add("l2", g_flush ? std::string("memset_flush") : "rotate_x" + std::to_string(copies))
      .add("launch", g_hold ? "held" : "stream")
      .add("bytes", bytes)
      .add("gb_s", gb_s)
      .add("frac_of_copy_bw", g_copy_gb_s > 0 ? gb_s / g_copy_gb_s : 0.0)
      .add("gpu", g_gpu)
      .add("command", g_command)
      .print();
  std::fprintf(stderr, "%-18s B=%-4d L=%-6d hq=%-3d hkv=%-3d d=%-4d splits=%-3d %9.2f us %8.1f GB/s (%.2f of copy)\n",
               impl, s.B, s.L, s.hq, s.hkv, s.d, plan.num_splits, st.p50, gb_s, g_copy_gb_s > 0 ? gb_s / g_copy_gb_s : 0.0);
}

// Spins for `cycles` SM clocks: holds the stream while the host enqueues the timed runs.
__global__ void hold_stream(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// bench::time_runs, but with --hold every timed run is queued behind a ~2.5 ms spin kernel, so
// the runs execute back to back as in a serving step (many layers enqueued ahead) and no timed
// interval can include the host's launch latency when the GPU is faster than the host.
std::vector<double> time_runs(const std::function<void()>& fn, cudaStream_t stream, int warmup, int iters) {
  if (!g_hold || g_flush) return bench::time_runs(fn, stream, warmup, iters, g_flush);
  return bench::time_runs(fn, stream, warmup, iters, /*flush_l2=*/false, [&] {
    hold_stream<<<1, 1, 0, stream>>>(5000000);  // 2.5 ms at 2 GHz: >> iters x the host's enqueue
    CUDA_CHECK_LAUNCH();
  });
}

void measure_copy(cudaStream_t stream) {
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_CHECK(cudaMalloc(&a, bytes));
  CUDA_CHECK(cudaMalloc(&b, bytes));
  CUDA_CHECK(cudaMemset(a, 1, bytes));
  auto us = bench::time_runs([&] { CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); },
                             stream, 5, g_iters, false);
  const bench::Stats st = bench::compute_stats(us);
  g_copy_gb_s = 2.0 * bytes / (st.p50 * 1e-6) / 1e9;  // read + write
  bench::JsonLine()
      .add("bench", "attention_decode")
      .add("impl", "d2d_copy")
      .add("bytes", 2.0 * bytes)
      .add("time_us_p50", st.p50)
      .add("gb_s", g_copy_gb_s)
      .add("gpu", g_gpu)
      .add("command", g_command)
      .print();
  std::fprintf(stderr, "d2d copy: %.1f GB/s (read + write)\n", g_copy_gb_s);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
}

// One timed configuration of a shape: the plan's choice ("flashserve"), a forced split count
// ("flashserve_forced") or the plan under other tuning, timed only where it plans differently from
// the default: "flashserve_plan_v2" (v2's 128-key minimum chunk), "flashserve_unpaired" (head_dim
// 64 with one kv head per block instead of pairs).
struct Variant {
  const char* impl;
  int forced_splits = 0;       // > 0: plan_decode_fixed with this many splits
  int min_chunk_len = 0;       // > 0: plan_attention_decode with this min_chunk_len
  int kv_heads_per_block = 0;  // 1: plan_attention_decode with one kv head per block
  bool sinks = false;          // per-head sinks in the arguments (same plan)
  bool tuned() const { return min_chunk_len > 0 || kv_heads_per_block > 0; }
};

DecodePlan make_plan(const Shape& s, const Variant& v, const std::vector<int32_t>& lens, int bs) {
  if (v.forced_splits > 0) return plan_decode_fixed(s.L, v.forced_splits, bs);
  DecodePlanConfig tuning;
  if (v.min_chunk_len > 0) tuning.min_chunk_len = v.min_chunk_len;
  tuning.kv_heads_per_block = v.kv_heads_per_block;
  return cuda::plan_attention_decode(lens.data(), s.B, s.hq, s.hkv, s.d, bs, DType::kBF16, -1, tuning);
}

// All variants run on the same data.
void run_shape(const Shape& s, const std::vector<Variant>& variants, cudaStream_t stream, int num_sms) {
  const int bs = 16;
  const size_t num_blocks = size_t(s.B) * ((s.L + bs - 1) / bs);
  const size_t cache_elems = num_blocks * bs * s.hkv * s.d;
  const size_t q_elems = size_t(s.B) * s.hq * s.d;
  // Enough KV copies that a copy is evicted before it is read again (>= 3 x L2 in between).
  const size_t kv_alloc = 2 * cache_elems * 2;
  const int copies = g_flush ? 1 : int(std::min<size_t>(128, (3 * g_l2_bytes + kv_alloc - 1) / kv_alloc));
  std::vector<void*> k(copies), v(copies);
  void *q = nullptr, *out = nullptr;
  for (int c = 0; c < copies; ++c) {
    CUDA_CHECK(cudaMalloc(&k[c], cache_elems * 2));
    CUDA_CHECK(cudaMalloc(&v[c], cache_elems * 2));
    fill(k[c], cache_elems, 1 + 2 * c);
    fill(v[c], cache_elems, 2 + 2 * c);
  }
  CUDA_CHECK(cudaMalloc(&q, q_elems * 2));
  CUDA_CHECK(cudaMalloc(&out, q_elems * 2));
  fill(q, q_elems, 1000);
  std::mt19937 rng(5);
  const bench::UniformPagedBatch batch(s.B, 1, s.L, bs, rng);
  const std::vector<int32_t>& h_lens = batch.kv_lens();
  const PagedAttentionArgs a = batch.args(s.hq, s.hkv, s.d, true);
  const std::vector<float> h_sinks(s.hq, -1e30f);  // weigh zero: the no-sink outputs
  float* sinks = nullptr;
  CUDA_CHECK(cudaMalloc(&sinks, h_sinks.size() * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(sinks, h_sinks.data(), h_sinks.size() * sizeof(float), cudaMemcpyHostToDevice));
  PagedAttentionArgs a_sinks = a;
  a_sinks.sinks = sinks;
  const double bytes = 2.0 * s.B * double(s.L) * s.hkv * s.d * 2 + 2.0 * q_elems * 2;

  const DecodePlan default_plan = make_plan(s, Variant{"flashserve"}, h_lens, bs);
  for (const Variant& var : variants) {
    const DecodePlan plan = make_plan(s, var, h_lens, bs);
    if (var.tuned() && plan.num_splits == default_plan.num_splits && plan.chunk_len == default_plan.chunk_len &&
        plan.kv_heads_per_block == default_plan.kv_heads_per_block)
      continue;  // same plan as the default: nothing to compare
    const PagedAttentionArgs& va = var.sinks ? a_sinks : a;
    const size_t ws_bytes = cuda::attention_decode_workspace_bytes(s.B, s.hq, s.d, plan);
    void* ws = nullptr;
    if (ws_bytes) CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    // One graph (partial + merge) per KV copy; eager launches if capture is refused.
    std::vector<cudaGraphExec_t> execs;
    try {
      for (int c = 0; c < copies; ++c) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        cuda::attention_decode(va, q, k[c], v[c], out, nullptr, DType::kBF16, plan, ws, ws_bytes, stream);
        CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        CUDA_CHECK(cudaGraphDestroy(graph));
        execs.push_back(exec);
      }
    } catch (const Error& e) {
      std::fprintf(stderr, "graph capture failed (%s): timing eager launches\n", e.what());
      cudaGraph_t graph;
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      for (cudaGraphExec_t e2 : execs) cudaGraphExecDestroy(e2);
      execs.clear();
    }
    int it = 0;
    auto us = time_runs(
        [&] {
          const int c = it++ % copies;
          if (!execs.empty())
            CUDA_CHECK(cudaGraphLaunch(execs[c], stream));
          else
            cuda::attention_decode(va, q, k[c], v[c], out, nullptr, DType::kBF16, plan, ws, ws_bytes, stream);
        },
        stream, 5, g_iters);
    emit(var.impl, s, plan, bench::compute_stats(us), bytes, copies);
    for (cudaGraphExec_t e : execs) CUDA_CHECK(cudaGraphExecDestroy(e));
    if (ws) CUDA_CHECK(cudaFree(ws));
  }
  for (int c = 0; c < copies; ++c) {
    CUDA_CHECK(cudaFree(k[c]));
    CUDA_CHECK(cudaFree(v[c]));
  }
  for (void* p : {q, out, static_cast<void*>(sinks)}) CUDA_CHECK(cudaFree(p));
}

}  // namespace
}  // namespace flashserve

int main(int argc, char** argv) {
  using namespace flashserve;
  bool quick = false;
  int only_d = 0;
  for (int i = 0; i < argc; ++i) {
    if (i) g_command += ' ';
    g_command += argv[i];
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc) g_iters = std::max(50, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--l2") && i + 1 < argc) g_flush = !std::strcmp(argv[i + 1], "flush");
    if (!std::strcmp(argv[i], "--hold")) g_hold = true;
    if (!std::strcmp(argv[i], "--head-dim") && i + 1 < argc) only_d = std::atoi(argv[i + 1]);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 77;
  }
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  g_gpu = bench::device_name(dev);
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  g_l2_bytes = size_t(l2);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  measure_copy(stream);

  const double kMaxKvBytes = 17.5e9;  // both K and V; keeps the largest shapes within 80 GB
  const std::vector<int> batches = quick ? std::vector<int>{1, 32} : std::vector<int>{1, 8, 32, 128};
  const std::vector<int> lens = quick ? std::vector<int>{2048} : std::vector<int>{512, 2048, 8192, 32768};
  struct Family {
    int hq, hkv, d;
    bool forced_one;  // also time num_splits = 1 and, for B <= 8, a split-count sweep
    bool sinks = false;  // also time the plan's and one split's launches with sinks
  };
  // Llama-style d128 GQA, d64, d128 MHA, head_dim 256: Gemma 3 1B (4 q : 1 kv) and Gemma 2 2B (8 : 4),
  // and gpt-oss (64 : 8 at head_dim 64, sinks).
  const Family families[] = {{32, 8, 128, true}, {32, 8, 64, false}, {32, 32, 128, false},
                             {4, 1, 256, true},  {8, 4, 256, false}, {64, 8, 64, false, true}};
  for (const Family& f : families)
    for (int B : only_d == 0 || only_d == f.d ? batches : std::vector<int>{})
      for (int L : lens) {
        const Shape s{B, L, f.hq, f.hkv, f.d};
        if (4.0 * B * double(L) * f.hkv * f.d > kMaxKvBytes) continue;
        // The sinks' cost does not depend on the shape much: batches 1 and 32 at 2048 and 8192 keys.
        if (f.sinks && ((B != 1 && B != 32) || (L != 2048 && L != 8192))) continue;
        std::vector<Variant> variants = {{"flashserve"}};
        if (B <= 8) variants.push_back({"flashserve_plan_v2", 0, 128});  // the v3 retune, side by side
        if (B <= 8 && f.d == 64) variants.push_back({"flashserve_unpaired", 0, 0, 1});  // next step 4
        if (f.forced_one) variants.push_back({"flashserve_forced", 1});
        if (f.sinks) {  // the merge adds the sinks (or the partial kernel, at one split)
          variants.push_back({"flashserve_sinks", 0, 0, 0, true});
          variants.push_back({"flashserve_forced", 1});
          variants.push_back({"flashserve_forced_sinks", 1, 0, 0, true});
        }
        // Split-count sweep, data for tuning plan_decode: d128 GQA and d256 Gemma 3 1B up to B = 8,
        // d64 at B = 1.
        if (!quick && ((f.forced_one && B <= 8) || (f.d == 64 && B == 1 && !f.sinks)))
          for (int n : {2, 4, 8, 16, 32, 64, 128})
            if (L / n >= 64) variants.push_back({"flashserve_forced", n});
        run_shape(s, variants, stream, sms);
      }
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
