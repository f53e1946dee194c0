// CUDA split-K decode attention (kernels/attention_decode.h) against the double CPU reference
// (kernels/cpu/paged_attention_ref.h): ragged batches with kv_len 0..32k, shuffled block tables,
// NaN in every cache slot no sequence owns, NaN-poisoned outputs and workspace, head_dim 64/128/256,
// block sizes 8/16/32, group sizes 1-16, bf16/fp16, planned and forced split counts (1, empty
// splits), large logits and tied keys, sliding windows (of 1 key, ragged, >= kv_len, over 32k
// contexts), soft-capping and sinks (one split and many). The merge kernel alone:
// test_attention_decode_merge.cpp.
// Thresholds: decode_tolerance.h.
#include <cuda_runtime.h>  // the typed cudaMalloc<T> overload
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/attention_decode.h"
#include "kernels/cpu/paged_attention_ref.h"
#include "kernels/cuda/cuda_check.h"
#include "tests/kernels/decode_tolerance.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve {
namespace {

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T))); }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& h) { CUDA_CHECK(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> h(count);
    CUDA_CHECK(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { CUDA_CHECK(cudaMemset(ptr, 0xff, std::max<size_t>(count, 1) * sizeof(T))); }  // NaN in f32/bf16/f16
};

uint16_t to_bits(DType t, float x) { return t == DType::kBF16 ? float_to_bf16_bits(x) : float_to_f16_bits(x); }
double from_bits(DType t, uint16_t b) { return t == DType::kBF16 ? bf16_bits_to_float(b) : f16_bits_to_float(b); }
constexpr uint16_t kNaNBits = 0xffff;  // NaN in both bf16 and fp16

struct Case {
  DType dtype = DType::kBF16;
  int head_dim = 128, block_size = 16, num_q_heads = 8, num_kv_heads = 2;
  std::vector<int> kv_lens;
  std::vector<int> splits = {0, 1};  // 0 = plan_decode's choice
  float q_scale = 1.f;               // 20x gives logits in the tens (peaked softmax)
  bool tied_keys = false;            // every 7th key repeats key 0 (ties in the max)
  bool want_lse = true;
  int kv_heads_per_block = 0;  // 1: force one kv head per block (head_dim 64 pairs by default)
  int window = 0;              // sliding window (0 = every key)
  float softcap = 0.f;         // soft-capping (0 = off)
  float scale = 0.f;           // softmax scale (0 = 1 / sqrt(head_dim))
  std::vector<float> sinks;    // [num_q_heads] sink logits (empty = none)
  uint32_t seed = 1;
  std::string name() const {
    return str_cat(dtype_name(dtype), " d", head_dim, " bs", block_size, " hq", num_q_heads, " hkv",
                   num_kv_heads, " B", kv_lens.size(), " window", window, " softcap", softcap,
                   sinks.empty() ? "" : " sinks", " seed", seed);
  }
};

struct Problem {
  PagedAttentionArgs host_args;  // host pointers into the vectors below
  std::vector<int32_t> cu_q_lens, kv_lens, block_table;
  std::vector<uint16_t> q_bits, k_bits, v_bits;
  std::vector<double> q, k, v, out_ref, lse_ref;
};

Problem build(const Case& c) {
  Problem p;
  std::mt19937 rng(c.seed);
  std::normal_distribution<float> nd(0.5f, 1.f);  // off-centre so outputs have a non-zero mean
  const int B = int(c.kv_lens.size()), d = c.head_dim, bs = c.block_size, hkv = c.num_kv_heads;
  p.kv_lens.assign(c.kv_lens.begin(), c.kv_lens.end());
  p.cu_q_lens.resize(B + 1);
  std::iota(p.cu_q_lens.begin(), p.cu_q_lens.end(), 0);
  int max_blocks = 1, total_blocks = 3;  // three spare blocks nobody owns
  for (int L : c.kv_lens) {
    max_blocks = std::max(max_blocks, (L + bs - 1) / bs + 2);  // two unused table slots at least
    total_blocks += (L + bs - 1) / bs;
  }
  std::vector<int32_t> perm(total_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.block_table.assign(size_t(B) * max_blocks, 1 << 29);  // unused slots: far out of bounds
  const size_t elems = size_t(total_blocks) * bs * hkv * d;
  p.k_bits.assign(elems, kNaNBits);
  p.v_bits.assign(elems, kNaNBits);
  p.k.assign(elems, std::numeric_limits<double>::quiet_NaN());
  p.v.assign(elems, std::numeric_limits<double>::quiet_NaN());
  int next = 0;
  for (int b = 0; b < B; ++b) {
    const int L = c.kv_lens[b];
    for (int i = 0; i < (L + bs - 1) / bs; ++i) p.block_table[size_t(b) * max_blocks + i] = perm[next++];
    for (int tok = 0; tok < L; ++tok) {
      const size_t blk = p.block_table[size_t(b) * max_blocks + tok / bs];
      for (int h = 0; h < hkv; ++h) {
        const size_t row = ((blk * bs + tok % bs) * hkv + h) * d;
        const size_t src = ((size_t(p.block_table[size_t(b) * max_blocks]) * bs) * hkv + h) * d;
        for (int e = 0; e < d; ++e) {
          const bool tie = c.tied_keys && tok > 0 && tok % 7 == 0;
          p.k_bits[row + e] = tie ? p.k_bits[src + e] : to_bits(c.dtype, nd(rng));
          p.v_bits[row + e] = to_bits(c.dtype, nd(rng));
          p.k[row + e] = from_bits(c.dtype, p.k_bits[row + e]);
          p.v[row + e] = from_bits(c.dtype, p.v_bits[row + e]);
        }
      }
    }
  }
  const size_t q_elems = size_t(B) * c.num_q_heads * d;
  p.q_bits.resize(q_elems);
  p.q.resize(q_elems);
  for (size_t i = 0; i < q_elems; ++i) {
    p.q_bits[i] = to_bits(c.dtype, nd(rng) * c.q_scale);
    p.q[i] = from_bits(c.dtype, p.q_bits[i]);
  }
  PagedAttentionArgs& a = p.host_args;
  a.num_seqs = B;
  a.cu_q_lens = p.cu_q_lens.data();
  a.kv_lens = p.kv_lens.data();
  a.block_table = p.block_table.data();
  a.max_blocks_per_seq = max_blocks;
  a.block_size = bs;
  a.num_q_heads = c.num_q_heads;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.scale = c.scale > 0.f ? c.scale : 1.f / std::sqrt(float(d));
  a.causal = true;
  a.window = c.window;
  a.softcap = c.softcap;
  a.sinks = c.sinks.empty() ? nullptr : c.sinks.data();  // host copy for the reference
  p.out_ref.resize(q_elems);
  p.lse_ref.resize(size_t(B) * c.num_q_heads);
  ref::paged_attention<double>(a, p.q.data(), p.k.data(), p.v.data(), p.out_ref.data(), p.lse_ref.data());
  return p;
}

DecodePlan make_plan(const Case& c, const Problem& p, int forced_splits) {
  int max_len = 0;  // the longest span of keys a query reads
  for (int L : c.kv_lens) max_len = std::max(max_len, decode_span(L, c.window));
  if (forced_splits > 0) {
    DecodePlan plan = plan_decode_fixed(max_len, forced_splits, c.block_size);
    plan.kv_heads_per_block = c.kv_heads_per_block;
    return plan;
  }
  DecodePlanConfig tuning;
  tuning.kv_heads_per_block = c.kv_heads_per_block;
  const DecodePlan plan = cuda::plan_attention_decode(p.kv_lens.data(), int(c.kv_lens.size()), c.num_q_heads,
                                                      c.num_kv_heads, c.head_dim, c.block_size, c.dtype, -1, tuning,
                                                      c.window);
  EXPECT_EQ(plan.kv_heads_per_block,
            c.kv_heads_per_block == 1 || c.head_dim != 64 || c.num_kv_heads % 2 != 0 ||
                    2 * c.num_q_heads / c.num_kv_heads > 16
                ? 1
                : 2);
  return plan;
}

struct Result {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

Result run_gpu(const Case& c, const Problem& p, const DecodePlan& plan) {
  DeviceBuffer<uint16_t> q(p.q_bits), k(p.k_bits), v(p.v_bits), out(p.q_bits.size());
  DeviceBuffer<int32_t> kv_lens(p.kv_lens), table(p.block_table);
  DeviceBuffer<float> lse(p.lse_ref.size()), sinks(c.sinks);
  const size_t ws_bytes = cuda::attention_decode_workspace_bytes(int(c.kv_lens.size()), c.num_q_heads, c.head_dim, plan);
  DeviceBuffer<unsigned char> ws(ws_bytes);
  out.poison();
  lse.poison();
  ws.poison();
  PagedAttentionArgs a = p.host_args;
  a.cu_q_lens = nullptr;  // decode does not read it
  a.kv_lens = kv_lens.ptr;
  a.block_table = table.ptr;
  a.sinks = c.sinks.empty() ? nullptr : sinks.ptr;
  cuda::attention_decode(a, q.ptr, k.ptr, v.ptr, out.ptr, c.want_lse ? lse.ptr : nullptr, c.dtype, plan,
                         ws.ptr, ws_bytes, nullptr);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  return {out.download(), c.want_lse ? lse.download() : std::vector<float>()};
}

void check(const Case& c, const Problem& p, const DecodePlan& plan, const Result& r) {
  const test::DecodeTolerance tol = test::decode_tolerance(c.dtype);
  const int d = c.head_dim, hq = c.num_q_heads;
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  size_t worst = 0, non_finite = 0;
  for (size_t i = 0; i < p.out_ref.size(); ++i) {
    const double got = from_bits(c.dtype, r.out[i]), want = p.out_ref[i];
    if (!std::isfinite(got)) {
      ++non_finite;
      continue;
    }
    const double e = std::abs(got - want);
    err2 += e * e;
    ref2 += want * want;
    max_ref = std::max(max_ref, std::abs(want));
    if (e > max_err) max_err = e, worst = i;
  }
  const std::string what = str_cat(c.name(), " splits ", plan.num_splits, " chunk ", plan.chunk_len);
  EXPECT_EQ(non_finite, 0u) << what << ": outputs left NaN/inf (poison not overwritten)";
  const double frob = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_LE(frob, tol.frob_rel) << what;
  EXPECT_LE(max_err, tol.max_abs_frac * std::max(max_ref, 1e-3))
      << what << ": worst element " << worst << " (seq " << worst / (size_t(hq) * d) << ", head "
      << worst / d % hq << ", col " << worst % d << ") got " << from_bits(c.dtype, r.out[worst])
      << " want " << p.out_ref[worst];
  for (size_t row = 0; row < p.lse_ref.size(); ++row) {  // kv_len 0: exactly zero output
    if (c.kv_lens[row / hq] != 0) continue;
    for (int e = 0; e < d; ++e) EXPECT_EQ(from_bits(c.dtype, r.out[row * d + e]), 0.0) << what;
  }
  if (!c.want_lse) return;
  for (size_t row = 0; row < p.lse_ref.size(); ++row) {
    const double want = p.lse_ref[row], got = r.lse[row];
    if (std::isinf(want)) {
      EXPECT_TRUE(std::isinf(got) && got < 0) << what << ": lse row " << row << " got " << got;
    } else {
      EXPECT_NEAR(got, want, tol.lse_abs) << what << ": lse row " << row;
    }
  }
}

void run_case(const Case& c) {
  const Problem p = build(c);
  for (int s : c.splits) {
    const DecodePlan plan = make_plan(c, p, s);
    check(c, p, plan, run_gpu(c, p, plan));
    if (::testing::Test::HasFailure()) return;  // one report per broken case is enough
  }
}

// Edge lengths around tiles (64), blocks (8/16/32) and the minimum chunk (256).
const int kEdgeLens[] = {1, 2, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 1000, 1543};

TEST(AttentionDecode, SweepDtypeHeadDimBlockSizeGroupSize) {
  std::mt19937 rng(2024);
  uint32_t seed = 100;
  for (DType dt : {DType::kBF16, DType::kF16})
    for (int d : {64, 128})
      for (int bs : {8, 16, 32})
        for (int group = 1; group <= 8; ++group) {
          const int hkv = seed % 3 == 0 ? 3 : 2;  // odd: one kv head per block even at d 64
          std::vector<int> lens;
          for (int b = 0; b < 4; ++b) lens.push_back(kEdgeLens[rng() % std::size(kEdgeLens)]);
          const int forced[] = {2, 3, 5, 16};
          run_case({.dtype = dt, .head_dim = d, .block_size = bs, .num_q_heads = hkv * group, .num_kv_heads = hkv,
                    .kv_lens = lens, .splits = {0, 1, forced[seed % 4]}, .want_lse = seed % 5 != 0, .seed = seed});
          ++seed;
          if (HasFailure()) return;
        }
}

TEST(AttentionDecode, LongRaggedSequences) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    // 200 splits: most are empty for every sequence but the first.
    run_case({.dtype = dt, .kv_lens = {32768, 1, 20001, 300}, .splits = {0, 1, 64, 200}, .seed = 7});
    run_case({.dtype = dt, .head_dim = 64, .block_size = 32, .num_q_heads = 16 /* group 8 */,
              .kv_lens = {32768, 4097}, .splits = {0, 1, 31}, .seed = 8});
  }
}

TEST(AttentionDecode, EmptySequencesAndEmptySplits) {
  for (DType dt : {DType::kBF16, DType::kF16})  // chunks of 64: splits 2.. are empty everywhere
    run_case({.dtype = dt, .kv_lens = {0, 1, 2, 64, 65, 0}, .splits = {0, 1, 2, 4, 9}, .seed = 9});
}

TEST(AttentionDecode, LargeLogitsAndTiedKeys) {
  for (DType dt : {DType::kBF16, DType::kF16})
    for (int d : {64, 128, 256})
      run_case({.dtype = dt, .head_dim = d, .num_q_heads = 16, .kv_lens = {4097, 777, 64}, .splits = {0, 1, 6},
                .q_scale = 20.f, .tied_keys = true, .seed = 10u + d});
}

TEST(AttentionDecode, NoGqaManyHeads) {
  for (int d : {64, 128})
    run_case({.head_dim = d, .num_q_heads = 32, .num_kv_heads = 32, .kv_lens = {3000, 50, 1},
              .splits = {0, 1, 3}, .seed = 12u + d});
}

// `lens` at head_dim 64 over four kv heads with each group size of `groups`, in both 16-bit
// types; the case's seed is seed_base + group.
void run_head_dim_64(std::initializer_list<int> groups, const Case& lens, uint32_t seed_base) {
  for (int group : groups)
    for (DType dt : {DType::kBF16, DType::kF16}) {
      Case c = lens;
      c.dtype = dt;
      c.head_dim = 64;
      c.num_kv_heads = 4;
      c.num_q_heads = 4 * group;
      c.seed = seed_base + group;
      run_case(c);
    }
}

// head_dim 64 with two kv heads per block: the largest group that pairs (8 -> 16 rows), the
// smallest (1), and group 5 (rows 0-4 / 5-9 straddle the fragment's row halves g and g + 8).
TEST(AttentionDecode, HeadDim64PairedHeads) {
  run_head_dim_64({1, 5, 8}, {.kv_lens = {2500, 129, 1, 64}, .splits = {0, 1, 5}}, 20);
}

// One sequence split as finely as the plan and the merge allow (one-tile chunks, up to 256 splits,
// several rounds of merge loads per thread), for head_dim 128 and paired head_dim 64. 256 splits:
// chunks of one tile (8192 / 256 rounds up to 64), 128 of them empty.
TEST(AttentionDecode, SingleSequenceManySplits) {
  for (int d : {64, 128}) {
    run_case({.head_dim = d, .num_q_heads = 32, .num_kv_heads = 8, .kv_lens = {8192},
              .splits = {0, 32, 128, 256}, .seed = 30u + d});
    run_case({.head_dim = d, .num_q_heads = 32, .num_kv_heads = 8, .kv_lens = {2048}, .splits = {0, 17},
              .seed = 40u + d});
  }
}

// head_dim 64 with an even kv-head count but one head per block, as the plan may choose for small
// batches (plan.kv_heads_per_block = 1): planned and forced split counts, several groups.
TEST(AttentionDecode, HeadDim64UnpairedByPlan) {
  run_head_dim_64({1, 4, 8}, {.kv_lens = {3000, 200, 1}, .splits = {0, 1, 7, 64}, .kv_heads_per_block = 1}, 50);
}

// Small enough for compute-sanitizer (memcheck / racecheck / synccheck): both head dims, both
// paths (one split writes the output, several go through the merge), a ragged last tile.
TEST(AttentionDecode, SmallForSanitizer) {
  for (int d : {64, 128, 256}) run_case({.head_dim = d, .kv_lens = {300, 65, 1}, .splits = {1, 3}, .seed = 14u + d});
}

// Sliding windows: of one key, shorter than a tile or a block, not a multiple of either, longer
// than some sequences; over kv_lens around tiles and blocks, planned and forced splits (splits
// start at kv_len - window, so forced ones cut the window, and some are empty).
TEST(AttentionDecode, SlidingWindows) {
  uint32_t seed = 60;
  for (int d : {64, 128})
    for (int window : {1, 5, 64, 100, 700})
      for (int bs : {8, 32}) {
        run_case({.head_dim = d, .block_size = bs, .num_q_heads = 8, .num_kv_heads = 2,
                  .kv_lens = {1, 65, 129, 1000, 1543, 0}, .splits = {0, 1, 3, 9}, .window = window,
                  .seed = seed++});
        if (HasFailure()) return;
      }
}

// Long contexts with a window (Gemma 3: 512; Mistral: 4096) plan window-sized work, and
// soft-capping alone and with a window (Gemma 2: cap 50, scale 1/sqrt(256), window 4096), with
// peaked logits so the cap bites.
TEST(AttentionDecode, LongContextWindowAndSoftcap) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    run_case({.dtype = dt, .num_q_heads = 8, .num_kv_heads = 1, .kv_lens = {32768, 511, 4097},
              .splits = {0, 1, 4}, .window = 512, .seed = 70});
    run_case({.dtype = dt, .head_dim = 64, .kv_lens = {32768, 300}, .splits = {0, 5}, .window = 4096, .seed = 71});
    for (int window : {0, 4096})
      run_case({.dtype = dt, .num_q_heads = 16, .kv_lens = {9000, 777, 64}, .splits = {0, 1, 6},
                .q_scale = 20.f, .window = window, .softcap = 50.f, .scale = 1.f / 16, .seed = 72});
    run_case({.dtype = dt, .head_dim = 64, .kv_lens = {3000, 65}, .splits = {0, 3}, .q_scale = 20.f,
              .window = 100, .softcap = 5.f, .seed = 73});
  }
}

// A window at least as long as every sequence is full attention: the same bits.
TEST(AttentionDecode, WindowCoveringTheSequenceIsFullAttention) {
  Case full{.kv_lens = {5000, 123, 64}, .seed = 74}, wide = full;
  wide.window = 5000;
  const Problem pf = build(full), pw = build(wide);
  for (int s : {0, 1, 7}) {
    const DecodePlan plan = make_plan(full, pf, s);
    EXPECT_EQ(run_gpu(full, pf, plan).out, run_gpu(wide, pw, plan).out) << "splits " << s;
  }
}

// head_dim 256 (Gemma 2/3: Q in shared memory, one block per SM): every block size and group
// size 1..16 over edge lengths, planned and forced splits, both 16-bit types.
TEST(AttentionDecode, HeadDim256Sweep) {
  std::mt19937 rng(256);
  uint32_t seed = 200;
  for (DType dt : {DType::kBF16, DType::kF16})
    for (int bs : {8, 16, 32})
      for (int group : {1, 2, 3, 4, 8, 16}) {
        std::vector<int> lens;
        for (int b = 0; b < 3; ++b) lens.push_back(kEdgeLens[rng() % std::size(kEdgeLens)]);
        const int forced[] = {2, 3, 5, 16};
        run_case({.dtype = dt, .head_dim = 256, .block_size = bs, .num_q_heads = 2 * group, .num_kv_heads = 2,
                  .kv_lens = lens, .splits = {0, 1, forced[seed % 4]}, .want_lse = seed % 5 != 0, .seed = seed});
        ++seed;
        if (HasFailure()) return;
      }
}

// head_dim 256 at Gemma's shapes: 1B (4 q heads : 1 kv head) with its 512-key window over
// several sequences of different lengths (kv_len 1, not a multiple of a tile or block, window
// larger than, equal to and smaller than kv_len, 32k context); 2B (8 : 4, group 2 ... and group 1)
// with soft-cap 50 at scale 1/16 and window 4096; one sequence split 256 ways.
TEST(AttentionDecode, HeadDim256GemmaShapes) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    run_case({.dtype = dt, .head_dim = 256, .num_q_heads = 4, .num_kv_heads = 1,
              .kv_lens = {1, 100, 512, 513, 1543, 32768}, .splits = {0, 1, 4, 9}, .window = 512, .seed = 210});
    for (int hq : {4, 8})
      for (int window : {0, 100, 4096})
        run_case({.dtype = dt, .head_dim = 256, .num_q_heads = hq, .num_kv_heads = 4,
                  .kv_lens = {9000, 777, 100, 65, 1}, .splits = {0, 1, 6}, .q_scale = 20.f, .window = window,
                  .softcap = 50.f, .scale = 1.f / 16, .seed = 211u + hq + window});
    run_case({.dtype = dt, .head_dim = 256, .num_q_heads = 16, .num_kv_heads = 4, .kv_lens = {8192},
              .splits = {0, 32, 256}, .seed = 212});
  }
}

// Sinks (gpt-oss: 64 q heads over 8 kv heads at head_dim 64, so kv heads pair; window 128 on every
// other layer): one split (the partial kernel adds the sink) and many (the merge adds it once),
// with empty sequences and empty splits (out 0, lse = the sink's), windows, soft-capping, GQA
// groups 1..16 and each head_dim. A sink far above the scores leaves outputs ~e^-30 of their
// no-sink size (a sink counted twice halves them: the relative error and the lse catch it).
TEST(AttentionDecode, Sinks) {
  uint32_t seed = 300;
  for (DType dt : {DType::kBF16, DType::kF16})
    for (int window : {0, 128}) {
      run_case({.dtype = dt, .head_dim = 64, .num_q_heads = 64, .num_kv_heads = 8,
                .kv_lens = {4097, 129, 1, 0, 700}, .splits = {0, 1, 3, 16}, .window = window,
                .sinks = test::random_sinks(64, seed), .seed = seed});
      ++seed;
    }
  for (int d : {64, 128, 256})
    for (int group : {1, 5, 16}) {
      run_case({.head_dim = d, .num_q_heads = 2 * group, .num_kv_heads = 2, .kv_lens = {3000, 65, 0, 1},
                .splits = {0, 1, 2, 9}, .sinks = test::random_sinks(2 * group, seed), .seed = seed});
      ++seed;
    }
  run_case({.num_q_heads = 16, .kv_lens = {9000, 777, 64}, .splits = {0, 1, 6}, .q_scale = 20.f, .window = 4096,
            .softcap = 50.f, .scale = 1.f / 16, .sinks = test::random_sinks(16, seed), .seed = seed});
  ++seed;
  run_case({.head_dim = 64, .num_q_heads = 16, .num_kv_heads = 2, .kv_lens = {5000, 300, 1},
            .splits = {0, 1, 7}, .sinks = std::vector<float>(16, 30.f), .seed = seed});
}

// A sink of -1e30 weighs exactly zero: the same bits as no sink, with one split and with many.
TEST(AttentionDecode, VeryNegativeSinkIsNoSink) {
  Case none{.head_dim = 64, .num_q_heads = 16, .num_kv_heads = 4, .kv_lens = {5000, 123, 64}, .seed = 75};
  Case tiny = none;
  tiny.sinks.assign(16, -1e30f);
  const Problem pn = build(none), pt = build(tiny);
  for (int s : {0, 1, 7}) {
    const DecodePlan plan = make_plan(none, pn, s);
    const Result a = run_gpu(none, pn, plan), b = run_gpu(tiny, pt, plan);
    EXPECT_EQ(a.out, b.out) << "splits " << s;
    EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float))) << "splits " << s;
  }
}

TEST(AttentionDecode, RepeatedRunsAreBitwiseIdentical) {
  const Case c{.kv_lens = {5000, 123}, .seed = 13};
  const Problem p = build(c);
  for (int s : {1, 7}) {
    const DecodePlan plan = make_plan(c, p, s);
    const Result a = run_gpu(c, p, plan), b = run_gpu(c, p, plan);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)));
  }
}

TEST(AttentionDecode, RejectsUnsupportedArguments) {
  const Case c{.kv_lens = {10}};
  const Problem p = build(c);
  DecodePlan plan = plan_decode_fixed(10, 1, 16);
  PagedAttentionArgs a = p.host_args;  // pointers are never dereferenced: validation comes first
  auto call = [&](const PagedAttentionArgs& args, DType t, const DecodePlan& pl, size_t ws) {
    void* out = const_cast<uint16_t*>(p.q_bits.data());  // non-null, never written
    cuda::attention_decode(args, p.q_bits.data(), p.k_bits.data(), p.v_bits.data(), out, nullptr, t, pl,
                           nullptr, ws, nullptr);
  };
  PagedAttentionArgs bad = a;
  bad.head_dim = 96;
  EXPECT_THROW(call(bad, DType::kBF16, plan, 0), Error);
  bad = a;
  bad.block_size = 12;
  EXPECT_THROW(call(bad, DType::kBF16, plan, 0), Error);
  bad = a;
  bad.num_q_heads = 34;  // 17 per kv head
  bad.num_kv_heads = 2;
  EXPECT_THROW(call(bad, DType::kBF16, plan, 0), Error);
  EXPECT_THROW(call(a, DType::kF32, plan, 0), Error);
  EXPECT_THROW(call(a, DType::kBF16, plan_decode_fixed(10, 4, 16), 16), Error);  // workspace too small
  DecodePlan paired = plan;
  paired.kv_heads_per_block = 2;  // head_dim 128 never pairs
  EXPECT_THROW(call(a, DType::kBF16, paired, 0), Error);
  bad = a;
  bad.head_dim = 64;
  bad.num_q_heads = 3;  // 3 kv heads of group 1: odd, cannot pair
  bad.num_kv_heads = 3;
  EXPECT_THROW(call(bad, DType::kBF16, paired, 0), Error);
  paired.kv_heads_per_block = 3;
  EXPECT_THROW(call(a, DType::kBF16, paired, 0), Error);
}

}  // namespace
}  // namespace flashserve
