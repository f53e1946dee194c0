// Benchmark of the CUDA prefill attention kernel (bf16, paged KV cache, block size 16 with a
// shuffled block table) on the shapes of docs/PREFILL_ATTENTION.md. One JSON line per
// (shape, implementation): the public launcher ("flashserve"), the mma.sync kernel's own choice
// ("flashserve:fa2") and each of its tile variants ("flashserve:<variant>"), and on Hopper each
// variant of the wgmma kernel ("flashserve:sm90:<variant>"; the contiguous variants "..._contig_..."
// are given the step's own K/V rows as a fused qkv buffer holds them, so fresh prompts skip the
// page gather and the chunked shape gathers pages). The public launcher runs twice: without the
// rows ("flashserve", the page gather) and, where it reads them (the Hopper kernel), offered
// them ("flashserve:kv_contig", its path in the backend). Both launcher runs again with per-head
// sinks (":sinks", gpt-oss): sinks of -1e30, which weigh exactly zero, so the time is the sink
// path's and max_abs_diff_vs_default must stay 0.
// FLOPs = 4 * H * D * (visible query-key pairs, counted exactly).
// Usage: bench_attention_prefill [iters] [shape-name-filter] [impl-name-filter: substrings separated
// by '|', any may match; '$' at the end of one: exact]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.cuh"
#include "bench/paged_batch.cuh"
#include "kernels/attention_prefill.h"
#include "kernels/cuda/attention_prefill_variants.h"
#include "kernels/cuda/cuda_check.h"

namespace {

using flashserve::DType;
using flashserve::PagedAttentionArgs;
namespace fb = flashserve::bench;

struct Shape {
  const char* name;
  int batch, heads, q_len, kv_len, head_dim;
  bool causal;
};

const Shape kShapes[] = {
    {"b1_h32_l4096_d128_causal", 1, 32, 4096, 4096, 128, true},
    {"b4_h32_l4096_d128_causal", 4, 32, 4096, 4096, 128, true},
    {"b1_h32_l16384_d128_causal", 1, 32, 16384, 16384, 128, true},
    {"b16_h16_l1024_d64_causal", 16, 16, 1024, 1024, 64, true},
    {"b1_h8_l8192_d128_noncausal", 1, 8, 8192, 8192, 128, false},
    {"b4_h32_l4096_d64_causal", 4, 32, 4096, 4096, 64, true},
    {"chunked_b1_h32_q512_kv8192_d128_causal", 1, 32, 512, 8192, 128, true},
    // head_dim 256 (Gemma 2/3, the mma.sync kernel only): Gemma 2 2B's 8 heads and Gemma 3 1B's 4.
    {"b1_h8_l8192_d256_causal", 1, 8, 8192, 8192, 256, true},
    {"b4_h4_l4096_d256_causal", 4, 4, 4096, 4096, 256, true},
    {"chunked_b1_h8_q512_kv8192_d256_causal", 1, 8, 512, 8192, 256, true},
};

// Deterministic pseudo-random bf16 fill on the device: uniform in [-1.7, 1.7) + offset.
__global__ void fill_random(__nv_bfloat16* x, size_t n, uint32_t seed, float offset) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 0x9e3779b9u ^ seed ^ uint32_t(i >> 32) * 0x85ebca6bu;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    x[i] = __float2bfloat16(float(h) * (3.4f / 4294967296.f) - 1.7f + offset);
  }
}

// The step's own K or V rows, as the fused qkv projection holds them ([num_tokens, fresh_stride],
// this tensor's heads from column 0 of `fresh`), gathered from the paged cache: token t of
// sequence b = t / q_len is at position kv_len - q_len + t % q_len. One CTA per token.
__global__ void gather_fresh_rows(__nv_bfloat16* fresh, const __nv_bfloat16* cache, const int32_t* block_table,
                                  int max_blocks_per_seq, int block_size, int q_len, int kv_len, int row_elems,
                                  int64_t fresh_stride) {
  const int t = blockIdx.x, b = t / q_len, pos = kv_len - q_len + t % q_len;
  const int64_t row = int64_t(block_table[int64_t(b) * max_blocks_per_seq + pos / block_size]) * block_size +
                      pos % block_size;
  for (int i = threadIdx.x; i < row_elems; i += blockDim.x)
    fresh[int64_t(t) * fresh_stride + i] = cache[row * row_elems + i];
}

__global__ void max_abs_diff(const __nv_bfloat16* a, const __nv_bfloat16* b, size_t n, float* out) {
  float m = 0.f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(__bfloat162float(a[i]) - __bfloat162float(b[i])));
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));  // non-negative floats order as ints
}

// Substring filter, alternatives separated by '|'; a trailing '$' asks for the exact name.
bool impl_matches(const std::string& impl, const std::string& filter) {
  const size_t bar = filter.find('|');
  if (bar != std::string::npos)
    return impl_matches(impl, filter.substr(0, bar)) || impl_matches(impl, filter.substr(bar + 1));
  if (!filter.empty() && filter.back() == '$') return impl == filter.substr(0, filter.size() - 1);
  return impl.find(filter) != std::string::npos;
}

double visible_pairs(const Shape& s) {
  double pairs = 0;
  const long long off = (long long)s.kv_len - s.q_len;
  for (int i = 0; i < s.q_len; ++i)
    pairs += s.causal ? double(std::min<long long>(s.kv_len, std::max<long long>(0, i + off + 1)))
                      : double(s.kv_len);
  return pairs * s.batch;
}

template <class T>
T* device_alloc(size_t n) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
  return p;
}

void run_shape(const Shape& s, int iters, const std::string& gpu, std::mt19937& rng,
               const std::string& impl_filter) {
  const int bs = 16, d = s.head_dim, h = s.heads;
  const int num_tokens = s.batch * s.q_len;
  const fb::UniformPagedBatch batch(s.batch, s.q_len, s.kv_len, bs, rng);
  const size_t q_elems = size_t(num_tokens) * h * d;
  const size_t cache_elems = size_t(batch.num_blocks()) * bs * h * d;
  auto* q = device_alloc<__nv_bfloat16>(q_elems);
  auto* k = device_alloc<__nv_bfloat16>(cache_elems);
  auto* v = device_alloc<__nv_bfloat16>(cache_elems);
  auto* out = device_alloc<__nv_bfloat16>(q_elems);
  auto* ref_out = device_alloc<__nv_bfloat16>(q_elems);
  float* lse = device_alloc<float>(size_t(num_tokens) * h);
  float* diff = device_alloc<float>(1);
  // Sinks of -1e30 (no weight: outputs equal the no-sink reference) for the ":sinks" runs.
  const std::vector<float> h_sinks(h, -1e30f);
  float* sinks = device_alloc<float>(h);
  CUDA_CHECK(cudaMemcpy(sinks, h_sinks.data(), h * sizeof(float), cudaMemcpyHostToDevice));
  fill_random<<<1024, 256>>>(q, q_elems, 1u, 0.25f);
  fill_random<<<1024, 256>>>(k, cache_elems, 2u, 0.5f);
  fill_random<<<1024, 256>>>(v, cache_elems, 3u, 0.5f);
  CUDA_CHECK_LAUNCH();

  const PagedAttentionArgs a = batch.args(h, h, d, s.causal);
  PagedAttentionArgs a_sinks = a;
  a_sinks.sinks = sinks;
  const double flops = 4.0 * h * d * visible_pairs(s);
  cudaStream_t stream = nullptr;
  // This step's own K/V rows in a fused qkv layout [num_tokens, (Hq + 2 Hkv) * d].
  const int64_t fresh_stride = int64_t(3) * h * d;
  auto* qkv = device_alloc<__nv_bfloat16>(size_t(num_tokens) * fresh_stride);
  gather_fresh_rows<<<num_tokens, 256>>>(qkv + int64_t(h) * d, k, a.block_table, a.max_blocks_per_seq, bs,
                                         s.q_len, s.kv_len, h * d, fresh_stride);
  gather_fresh_rows<<<num_tokens, 256>>>(qkv + int64_t(2) * h * d, v, a.block_table, a.max_blocks_per_seq, bs,
                                         s.q_len, s.kv_len, h * d, fresh_stride);
  CUDA_CHECK_LAUNCH();
  const flashserve::cuda::FreshKv fresh{qkv + int64_t(h) * d, qkv + int64_t(2) * h * d, fresh_stride, fresh_stride};

  namespace fd = flashserve::cuda::detail;
  // The reference output: the launcher without the fresh rows (the paged path).
  flashserve::cuda::attention_prefill(a, num_tokens, q, k, v, ref_out, lse, DType::kBF16, stream);
  // Implementations: the public launcher, the mma.sync kernel's own choice and each of its tile
  // variants, and each variant of the Hopper kernel where it runs.
  struct Impl {
    std::string name;
    int kernel;  // 0 launcher with fresh rows, 1 mma.sync default, 2 mma.sync variant,
                 // 3 Hopper variant, 4 diagnostic, 5 launcher without fresh rows
    int variant;
    bool sinks = false;  // the arguments with sinks (kernels 0 and 5)
  };
  // The launcher is named for its K/V source: the page gather, or the step's fresh rows.
  std::vector<Impl> impls = {{"flashserve", 5, -1}, {"flashserve:sinks", 5, -1, true}, {"flashserve:fa2", 1, -1}};
  const bool sm90_head_dim = fd::prefill_sm90_num_variants(d) > 0;  // the Hopper kernel: d64/d128
  if (flashserve::cuda::attention_prefill_reads_fresh_kv(d)) {
    impls.push_back({"flashserve:kv_contig", 0, -1});
    impls.push_back({"flashserve:kv_contig:sinks", 0, -1, true});
  }
  for (int v = 0; v < fd::prefill_num_variants(d); ++v)
    impls.push_back({std::string("flashserve:") + fd::prefill_variant_name(d, v), 2, v});
  if (fd::prefill_sm90_available() && sm90_head_dim) {
    for (int v = 0; v < fd::prefill_sm90_num_variants(d); ++v)
      impls.push_back({std::string("flashserve:sm90:") + fd::prefill_sm90_variant_name(d, v), 3, v});
    // Diagnostic (output not attention): variant 1 (two consumers, TMA, ping-pong) without K/V
    // copies, i.e. what the consumer warpgroups reach when loads are free.
    impls.push_back({"diag:sm90_no_kv_loads", 4, 1});
  }
  for (const Impl& im : impls) {
    const std::string& impl = im.name;
    if (!impl_matches(impl, impl_filter)) continue;
    const PagedAttentionArgs& la = im.sinks ? a_sinks : a;  // the launcher's arguments
    auto fn = [&] {
      switch (im.kernel) {
        case 0:
          flashserve::cuda::attention_prefill(la, num_tokens, q, k, v, out, lse, DType::kBF16, stream, &fresh);
          break;
        case 5:
          flashserve::cuda::attention_prefill(la, num_tokens, q, k, v, out, lse, DType::kBF16, stream);
          break;
        case 1:
          fd::attention_prefill_fa2(a, num_tokens, q, k, v, out, lse, DType::kBF16, stream);
          break;
        case 2:
          fd::attention_prefill_variant(im.variant, a, num_tokens, q, k, v, out, lse, DType::kBF16, stream);
          break;
        case 3:
          fd::attention_prefill_sm90(im.variant, a, num_tokens, q, k, v, out, lse, DType::kBF16, stream,
                                     impl.find("contig") != std::string::npos ? &fresh : nullptr);
          break;
        default:
          fd::attention_prefill_sm90_timing_only(im.variant, a, num_tokens, q, k, v, out, lse, DType::kBF16,
                                                 stream);
      }
    };
    // Poison (0x7f7f: a huge finite bf16) so rows an implementation leaves unwritten show up in
    // max_abs_diff_vs_default.
    CUDA_CHECK(cudaMemset(out, 0x7f, q_elems * sizeof(__nv_bfloat16)));
    const fb::Stats st = fb::compute_stats(fb::time_runs(fn, stream, 5, iters));
    CUDA_CHECK(cudaMemset(diff, 0, 4));
    max_abs_diff<<<1024, 256, 0, stream>>>(out, ref_out, q_elems, diff);
    CUDA_CHECK_LAUNCH();
    float h_diff = 0;
    CUDA_CHECK(cudaMemcpy(&h_diff, diff, 4, cudaMemcpyDeviceToHost));
    fb::JsonLine()
        .add("bench", "attention_prefill")
        .add("impl", impl)
        .add("shape", s.name)
        .add("dtype", "bf16")
        .add("batch", s.batch)
        .add("num_heads", s.heads)
        .add("q_len", s.q_len)
        .add("kv_len", s.kv_len)
        .add("head_dim", d)
        .add("causal", s.causal)
        .add("block_size", bs)
        .add("time_us_p50", st.p50)
        .add("time_us_p10", st.p10)
        .add("time_us_p90", st.p90)
        .add("iters", st.n)
        .add("flop", flops)
        .add("tflops", flops / (st.p50 * 1e-6) / 1e12)
        .add("max_abs_diff_vs_default", double(h_diff))
        .add("default_kernel", fd::prefill_default_kernel())
        .add("prefill_kv", im.kernel == 0 ? "contig" : "paged")
        .add("sinks", im.sinks)
        .add("gpu", gpu)
        .print();
    std::fprintf(stderr, "%-40s %-24s %9.1f us %7.1f TFLOP/s\n", s.name, impl.c_str(), st.p50,
                 flops / (st.p50 * 1e-6) / 1e12);
  }
  for (void* p : {(void*)q, (void*)k, (void*)v, (void*)out, (void*)ref_out, (void*)lse, (void*)diff, (void*)qkv,
                  (void*)sinks})
    CUDA_CHECK(cudaFree(p));
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::max(30, std::atoi(argv[1])) : 40;
  const std::string filter = argc > 2 ? argv[2] : "";
  const std::string impl_filter = argc > 3 ? argv[3] : "";
  try {
    const std::string gpu = fb::device_name();
    std::mt19937 rng(1234);
    for (const Shape& s : kShapes)
      if (filter.empty() || std::string(s.name).find(filter) != std::string::npos)
        run_shape(s, iters, gpu, rng, impl_filter);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_prefill: %s\n", e.what());
    return 1;
  }
  return 0;
}
