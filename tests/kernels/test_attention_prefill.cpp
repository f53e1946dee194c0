// CUDA prefill attention vs the fp64 CPU reference: q_len 1..2500, chunked (q_len < kv_len),
// causal and not, group sizes 1/4/8, head_dim 64/128/256, ragged batches with empty sequences,
// block sizes 16/32/24 with shuffled tables, NaN in unowned cache slots, poisoned outputs,
// large logits, fp16, tile edges, sliding windows (of 1 key, ragged, shorter than a chunk of a
// long cached sequence, covering the sequence), soft-capping (Gemma 2), sinks (gpt-oss), every compiled tile
// variant, determinism and argument checks (head_dim 256: the mma.sync kernel only);
// the matrix runs on the public launcher and on each kernel (mma.sync, and Hopper where available,
// with paged K/V and with its contiguous fresh-prompt variants given the step's own K/V rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/attention_prefill.h"
#include "kernels/cuda/attention_prefill_variants.h"
#include "prefill_test_util.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {
namespace {

std::vector<PrefillCase> default_cases() {
  std::vector<PrefillCase> cs;
  auto add = [&](std::string name, std::vector<SeqSpec> seqs, int hq, int hkv, int d, int bs,
                 bool causal, DType dt = DType::kBF16, float q_scale = 1.f) {
    cs.push_back({.name = std::move(name), .seqs = std::move(seqs), .num_q_heads = hq, .num_kv_heads = hkv,
                  .head_dim = d, .block_size = bs, .causal = causal, .dtype = dt, .q_scale = q_scale});
  };
  add("single_token", {{1, 1}}, 4, 4, 128, 16, true);
  add("one_query_long_kv_g8", {{1, 1000}}, 8, 1, 128, 16, true);
  add("square_17_g4_d64", {{17, 17}}, 8, 2, 64, 16, true);
  add("square_129_g8_bs32", {{129, 129}}, 8, 1, 128, 32, true);
  add("chunked_100_over_1000_g4", {{100, 1000}}, 8, 2, 128, 16, true);
  add("chunked_noncausal_d64_bs32", {{77, 333}}, 4, 1, 64, 32, false);
  add("q_longer_than_kv", {{40, 20}}, 2, 1, 128, 16, true);
  add("ragged_causal_d128", {{0, 0}, {1, 65}, {63, 63}, {200, 517}, {16, 16}, {0, 37}, {130, 130}},
      8, 2, 128, 16, true);
  add("ragged_noncausal_d64_bs32", {{5, 0}, {1, 65}, {129, 300}, {64, 64}, {0, 0}}, 8, 8, 64, 32,
      false);
  add("odd_block_size_24", {{70, 90}, {3, 200}}, 4, 2, 64, 24, true);
  add("large_logits_d128", {{300, 300}}, 4, 4, 128, 16, true, DType::kBF16, 20.f);
  add("large_logits_d64_chunked", {{150, 700}}, 4, 1, 64, 32, true, DType::kBF16, 30.f);
  add("long_causal_d128_g2", {{2500, 2500}}, 2, 1, 128, 16, true);
  add("long_causal_d64_4096_bs32", {{4096, 4096}}, 2, 1, 64, 32, true);  // several thousand rows
  add("long_noncausal_d64", {{1500, 1500}}, 2, 2, 64, 16, false);
  add("f16_ragged_d128", {{33, 33}, {100, 450}, {1, 1}}, 8, 2, 128, 16, true, DType::kF16);
  add("f16_d64_large_logits", {{257, 257}}, 4, 4, 64, 32, false, DType::kF16, 10.f);
  add("f16_long_d128", {{1100, 1100}}, 2, 2, 128, 16, true, DType::kF16);
  // Grids of >= 2 CTAs per SM, so the public launcher takes its large-grid tile shape.
  add("large_grid_causal_d128_g4", {{1100, 1100}}, 32, 8, 128, 16, true);
  add("large_grid_noncausal_d64_g8", {{700, 700}, {300, 900}}, 32, 4, 64, 32, false);
  // Rows and keys around the 64/128-row tiles of both kernels.
  add("tile_edges_d128", {{128, 128}, {127, 255}, {129, 257}, {256, 256}, {64, 383}}, 4, 2, 128, 16,
      true);
  add("tile_edges_d64_bs32", {{128, 128}, {65, 129}, {192, 256}, {1, 384}}, 4, 4, 64, 32, false);
  // Page sizes for the Hopper kernel's bulk copies (8-row pieces: block_size % 8 == 0) and its
  // cp.async fallback (block_size 12).
  add("pages_bs8_d64_g2", {{200, 333}, {129, 129}}, 4, 2, 64, 8, true);
  add("fallback_bs12_d128", {{150, 150}, {7, 260}, {300, 700}}, 4, 1, 128, 12, true);
  return cs;
}

// Sliding windows and soft-capping: windows that are not multiples of any tile (32..128 keys) or
// block, chunks longer than the window over contexts much longer than it (whole tiles skipped),
// ragged batches, TMA pages (bs 8) and the cp.async fallback (bs 12), GQA, both head dims, fp16.
std::vector<PrefillCase> window_cases() {
  const DType bf = DType::kBF16;
  return {
      {.name = "win1_chunked_d128", .seqs = {{100, 1000}}, .num_kv_heads = 2, .window = 1},
      {.name = "win100_d64_bs32", .seqs = {{700, 700}, {1, 500}}, .num_q_heads = 4, .num_kv_heads = 1,
       .head_dim = 64, .block_size = 32, .window = 100},
      {.name = "win257_chunk600_kv5000_g4", .seqs = {{600, 5000}, {3, 4000}}, .num_kv_heads = 2, .window = 257},
      {.name = "win77_ragged_bs12", .seqs = {{0, 0}, {1, 65}, {63, 63}, {200, 517}, {130, 130}},
       .num_kv_heads = 2, .block_size = 12, .window = 77},
      {.name = "win512_long_d64_bs8", .seqs = {{4096, 4096}}, .num_q_heads = 4, .num_kv_heads = 2,
       .head_dim = 64, .block_size = 8, .window = 512},
      {.name = "win50_noncausal_d64", .seqs = {{77, 333}}, .num_q_heads = 4, .num_kv_heads = 1, .head_dim = 64,
       .causal = false, .window = 50},
      {.name = "softcap50_gemma2_d128", .seqs = {{300, 300}, {50, 900}}, .num_kv_heads = 4, .q_scale = 20.f,
       .softcap = 50.f, .scale = 1.f / 16},
      {.name = "softcap_win4096_d128", .seqs = {{1000, 5000}}, .num_q_heads = 4, .num_kv_heads = 2, .dtype = bf,
       .q_scale = 20.f, .window = 4096, .softcap = 50.f, .scale = 1.f / 16},
      {.name = "softcap30_win200_f16_d64", .seqs = {{257, 257}, {100, 700}}, .num_q_heads = 4, .num_kv_heads = 4,
       .head_dim = 64, .dtype = DType::kF16, .q_scale = 10.f, .window = 200, .softcap = 30.f},
  };
}

// Sinks (gpt-oss: 64 q heads over 8 kv heads at head_dim 64, a window of 128 on every other
// layer): fresh prompts (the Hopper kernel's contiguous path), chunks over a cached prefix, rows
// that see no key (q_len > kv_len: out 0, lse = the sink's), an empty sequence, GQA, head_dim 128,
// fp16, soft-capping, non-causal, and a sink far above the scores (outputs ~e^-30 of their
// no-sink size: a sink counted twice, or not at all, fails the relative bound and the lse).
std::vector<PrefillCase> sink_cases() {
  return {
      {.name = "sinks_gptoss_d64_g8", .seqs = {{300, 300}, {1, 1}, {100, 1000}, {0, 0}}, .num_q_heads = 64,
       .num_kv_heads = 8, .head_dim = 64, .sinks = random_sinks(64, 1)},
      {.name = "sinks_gptoss_win128_d64_g8", .seqs = {{700, 700}, {50, 900}}, .num_q_heads = 64,
       .num_kv_heads = 8, .head_dim = 64, .window = 128, .sinks = random_sinks(64, 2)},
      {.name = "sinks_d128_g4_q_longer_than_kv", .seqs = {{200, 200}, {33, 500}, {10, 4}}, .num_q_heads = 8,
       .num_kv_heads = 2, .sinks = random_sinks(8, 3)},
      {.name = "sinks_f16_softcap_win_d64", .seqs = {{257, 257}, {100, 700}}, .num_q_heads = 4, .num_kv_heads = 4,
       .head_dim = 64, .dtype = DType::kF16, .q_scale = 10.f, .window = 200, .softcap = 30.f,
       .sinks = random_sinks(4, 4)},
      {.name = "sinks_noncausal_d128_bs12", .seqs = {{77, 333}}, .num_q_heads = 4, .num_kv_heads = 1,
       .block_size = 12, .causal = false, .sinks = random_sinks(4, 5)},
      {.name = "sinks_large_d128", .seqs = {{300, 300}, {40, 600}}, .num_q_heads = 8, .num_kv_heads = 2,
       .sinks = std::vector<float>(8, 30.f)},
  };
}

uint64_t seed_of(const std::string& name, int variant) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a fresh, reproducible input per case
  for (char ch : name) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h ^ (uint64_t(variant) << 56);
}

TEST(AttentionPrefill, MatchesReferencePublicLauncher) {
  // The cases offer the fresh K/V rows; the launcher reads them on the Hopper kernel (the paged
  // path of the same kernel is its variant 0, checked by the Sm90 cases below).
  std::printf("launcher runs the %s kernel, K/V %s\n", cuda::detail::prefill_default_kernel(),
              cuda::attention_prefill_reads_fresh_kv(128) ? "contig (fresh prompts)" : "paged");
  for (const PrefillCase& c : default_cases()) {
    const CheckResult r = run_and_check(c, seed_of(c.name, 0));
    std::printf("%s\n", r.message.c_str());
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// The same matrix on each kernel explicitly (one harness): the mma.sync kernel everywhere, the
// Hopper kernel where it is available (compute capability 9.x and an sm_90a build).
class AttentionPrefillKernel : public ::testing::TestWithParam<PrefillKernel> {
 protected:
  bool hopper() const { return GetParam() == PrefillKernel::kSm90 || GetParam() == PrefillKernel::kSm90Contig; }
  void SetUp() override {
    if (hopper() && !cuda::detail::prefill_sm90_available())
      GTEST_SKIP() << "the Hopper kernel needs an sm_90a build on a compute capability 9.x GPU";
  }
  // The variants a parameter runs: every tile variant of its kernel; for kSm90Contig only the
  // contiguous ones (the others ignore the fresh K/V rows and are covered by kSm90).
  std::vector<int> variants(int head_dim) const {
    std::vector<int> vs;
    const int n = hopper() ? cuda::detail::prefill_sm90_num_variants(head_dim)
                           : cuda::detail::prefill_num_variants(head_dim);
    for (int v = 0; v < n; ++v)
      if (GetParam() != PrefillKernel::kSm90Contig || variant_name(head_dim, v).find("contig") != std::string::npos)
        vs.push_back(v);
    return vs;
  }
  std::string variant_name(int head_dim, int v) const {
    return hopper() ? cuda::detail::prefill_sm90_variant_name(head_dim, v)
                    : cuda::detail::prefill_variant_name(head_dim, v);
  }
  size_t variant_smem(int head_dim, int v) const {  // the Hopper kernel needs sm_90's 227 KiB
    return hopper() ? 0 : cuda::detail::prefill_variant_smem_bytes(head_dim, v);
  }
  bool fits(int head_dim, int v) const {  // within this GPU's shared memory per block
    int device = 0, smem_optin = 0;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), cudaSuccess);
    return variant_smem(head_dim, v) <= size_t(smem_optin);
  }
  // `cases` on this kernel at its default tile, and at every tile that fits for those named in
  // `every_variant`.
  void run_cases(std::vector<PrefillCase> cases, const std::vector<std::string>& every_variant) const {
    for (PrefillCase& c : cases) {
      c.kernel = GetParam();
      std::vector<int> vs = {-1};
      if (std::find(every_variant.begin(), every_variant.end(), c.name) != every_variant.end())
        vs = variants(c.head_dim);
      for (int v : vs) {
        c.variant = v;
        if (v >= 0 && !fits(c.head_dim, v)) continue;  // refused: see MatchesReferenceEveryVariant
        const CheckResult r = run_and_check(c, seed_of(c.name, v + 1));
        std::printf("%s\n", r.message.c_str());
        EXPECT_TRUE(r.ok) << r.message;
      }
    }
  }
};

TEST_P(AttentionPrefillKernel, MatchesReference) {
  for (PrefillCase c : default_cases()) {
    c.kernel = GetParam();  // variant -1: the kernel's own default tile choice
    const CheckResult r = run_and_check(c, seed_of(c.name, 0));
    std::printf("%s\n", r.message.c_str());
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST_P(AttentionPrefillKernel, MatchesReferenceEveryVariant) {
  const char* subset[] = {"one_query_long_kv_g8",  "square_17_g4_d64",     "chunked_100_over_1000_g4",
                          "ragged_causal_d128",    "ragged_noncausal_d64_bs32", "large_logits_d128",
                          "large_logits_d64_chunked", "odd_block_size_24", "q_longer_than_kv",
                          "tile_edges_d128",       "tile_edges_d64_bs32", "pages_bs8_d64_g2",
                          "fallback_bs12_d128"};
  int device = 0, smem_optin = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
            cudaSuccess);
  for (PrefillCase c : default_cases()) {
    bool pick = false;
    for (const char* s : subset) pick |= c.name == s;
    if (!pick) continue;
    c.kernel = GetParam();
    for (int v : variants(c.head_dim)) {
      c.variant = v;
      if (variant_smem(c.head_dim, v) > size_t(smem_optin)) {
        // A test-only tile over this GPU's shared memory (sm_86/89): launch_prefill refuses it.
        std::printf("%s: %s needs more shared memory than this GPU's %d bytes: refused\n",
                    c.name.c_str(), variant_name(c.head_dim, v).c_str(), smem_optin);
        continue;
      }
      const CheckResult r = run_and_check(c, seed_of(c.name, v + 1));
      std::printf("%s (%s)\n", r.message.c_str(), variant_name(c.head_dim, v).c_str());
      EXPECT_TRUE(r.ok) << r.message;
    }
  }
}

TEST_P(AttentionPrefillKernel, SlidingWindowAndSoftcap) {
  // Every tile for two cases: tile sizes change which KV tiles are skipped and masked.
  run_cases(window_cases(), {"win257_chunk600_kv5000_g4", "win100_d64_bs32"});
}

TEST(AttentionPrefill, SinksPublicLauncher) {
  for (const PrefillCase& c : sink_cases()) {
    const CheckResult r = run_and_check(c, seed_of(c.name, 0));
    std::printf("%s\n", r.message.c_str());
    EXPECT_TRUE(r.ok) << r.message;
  }
}

TEST_P(AttentionPrefillKernel, Sinks) { run_cases(sink_cases(), {"sinks_gptoss_win128_d64_g8"}); }

// A sink of -1e30 weighs exactly zero: the same bits as no sink.
TEST_P(AttentionPrefillKernel, VeryNegativeSinkIsNoSink) {
  PrefillCase none{.name = "no_sink", .seqs = {{300, 300}, {70, 1000}}, .num_kv_heads = 2};
  PrefillCase tiny = none;
  tiny.name = "sink_-1e30";
  tiny.sinks.assign(8, -1e30f);
  std::vector<uint16_t> a, b;
  none.kernel = tiny.kernel = GetParam();
  ASSERT_TRUE(run_and_check(none, 6, &a).ok);
  ASSERT_TRUE(run_and_check(tiny, 6, &b).ok);
  EXPECT_EQ(a, b);
}

// A window covering every sequence is full attention: the same bits.
TEST_P(AttentionPrefillKernel, WindowCoveringTheSequenceIsFullAttention) {
  PrefillCase full{.name = "full_for_window", .seqs = {{300, 300}, {70, 1000}}, .num_kv_heads = 2};
  PrefillCase wide = full;
  wide.name = "window_1000";
  wide.window = 1000;
  std::vector<uint16_t> a, b;
  full.kernel = wide.kernel = GetParam();
  ASSERT_TRUE(run_and_check(full, 5, &a).ok);
  ASSERT_TRUE(run_and_check(wide, 5, &b).ok);
  EXPECT_EQ(a, b);
}

TEST_P(AttentionPrefillKernel, Deterministic) {
  for (PrefillCase c : default_cases()) {
    // (square_129_g8_bs32: a fresh prompt with a full tile, the contiguous path's bulk copy)
    if (c.name != "chunked_100_over_1000_g4" && c.name != "ragged_noncausal_d64_bs32" &&
        c.name != "square_129_g8_bs32")
      continue;
    std::vector<uint16_t> a, b;
    c.kernel = GetParam();
    c.variant = variants(c.head_dim).front();
    ASSERT_TRUE(run_and_check(c, 7, &a).ok);
    ASSERT_TRUE(run_and_check(c, 7, &b).ok);
    EXPECT_EQ(a, b) << c.name << ": two runs on the same input differ";
  }
}

// Small shapes for compute-sanitizer memcheck / racecheck / synccheck (bench/gpu.sh soak runs
// them with --gtest_filter='*AttentionPrefillSmall*').
class AttentionPrefillSmall : public AttentionPrefillKernel {};

TEST_P(AttentionPrefillSmall, SanitizerSubset) {
  std::vector<PrefillCase> cs(3);
  cs[0].name = "san_ragged_d128";
  cs[0].seqs = {{1, 17}, {33, 33}, {0, 5}, {70, 150}, {130, 300}};
  cs[0].num_q_heads = 4;
  cs[0].num_kv_heads = 2;
  cs[1].name = "san_d64_bs32";
  cs[1].seqs = {{20, 70}, {130, 130}, {256, 256}};
  cs[1].num_q_heads = 2;
  cs[1].num_kv_heads = 1;
  cs[1].head_dim = 64;
  cs[1].block_size = 32;
  cs[1].causal = false;
  cs[2].name = "san_bs12_d128";  // the Hopper kernel's cp.async fallback
  cs[2].seqs = {{50, 140}, {3, 30}};
  cs[2].num_q_heads = 2;
  cs[2].num_kv_heads = 2;
  cs[2].block_size = 12;
  for (PrefillCase c : cs) {
    c.kernel = GetParam();
    // The kernel's own choice, and for the mma.sync kernel also the large-grid default it takes
    // for big batches (what a long prefill runs), for the Hopper kernel also its TMA variant, for
    // its contiguous path every contiguous variant.
    std::vector<int> vs = {-1};
    if (GetParam() == PrefillKernel::kFa2)
      vs.push_back(cuda::detail::prefill_default_variant(c.head_dim, 1 << 20, 64, 32));
    else if (GetParam() == PrefillKernel::kSm90)
      vs.push_back(1);
    else
      vs = variants(c.head_dim);
    for (int v : vs) {
      c.variant = v;
      const CheckResult r = run_and_check(c, seed_of(c.name, v + 1));
      std::printf("%s\n", r.message.c_str());
      EXPECT_TRUE(r.ok) << r.message;
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<PrefillKernel>& info) {
  return kernel_name(info.param);
}
INSTANTIATE_TEST_SUITE_P(Kernels, AttentionPrefillKernel,
                         ::testing::Values(PrefillKernel::kFa2, PrefillKernel::kSm90, PrefillKernel::kSm90Contig),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Kernels, AttentionPrefillSmall,
                         ::testing::Values(PrefillKernel::kFa2, PrefillKernel::kSm90, PrefillKernel::kSm90Contig),
                         param_name);

// head_dim 256 (Gemma 2/3), which only the mma.sync kernel serves: kv_len 1, kv_len off the block
// and tile sizes, ragged batches, chunks, GQA groups 4 (Gemma 3 1B), 2 (Gemma 2 2B) and 1, windows
// smaller than, equal to and larger than kv_len (tiles before the window skipped), soft-cap 50,
// sinks.
std::vector<PrefillCase> head_dim_256_cases() {
  const DType f16 = DType::kF16;
  return {
      {.name = "d256_single_token", .seqs = {{1, 1}}, .num_q_heads = 4, .num_kv_heads = 1, .head_dim = 256},
      {.name = "d256_ragged_g4", .seqs = {{0, 0}, {1, 65}, {63, 63}, {200, 517}, {16, 16}, {130, 130}},
       .num_q_heads = 4, .num_kv_heads = 1, .head_dim = 256},
      {.name = "d256_chunked_g2", .seqs = {{100, 1000}, {33, 77}}, .num_q_heads = 8, .num_kv_heads = 4,
       .head_dim = 256},
      {.name = "d256_noncausal_g1_bs32", .seqs = {{77, 333}, {5, 0}}, .num_q_heads = 4, .num_kv_heads = 4,
       .head_dim = 256, .block_size = 32, .causal = false},
      {.name = "d256_tile_edges_bs24", .seqs = {{64, 64}, {63, 127}, {65, 129}, {128, 128}, {32, 95}},
       .num_q_heads = 4, .num_kv_heads = 1, .head_dim = 256, .block_size = 24},
      {.name = "d256_large_logits", .seqs = {{300, 300}}, .num_q_heads = 4, .num_kv_heads = 1, .head_dim = 256,
       .q_scale = 20.f},
      {.name = "d256_f16_ragged", .seqs = {{33, 33}, {100, 450}, {1, 1}}, .num_q_heads = 8, .num_kv_heads = 4,
       .head_dim = 256, .dtype = f16, .q_scale = 5.f},
      {.name = "d256_win512_long_g4", .seqs = {{1500, 1500}}, .num_q_heads = 4, .num_kv_heads = 1,
       .head_dim = 256, .window = 512},
      {.name = "d256_win100_ragged", .seqs = {{300, 1000}, {1, 50}, {100, 100}, {70, 170}}, .num_q_heads = 4,
       .num_kv_heads = 1, .head_dim = 256, .window = 100},
      {.name = "d256_softcap50_g2", .seqs = {{300, 300}, {50, 900}}, .num_q_heads = 8, .num_kv_heads = 4,
       .head_dim = 256, .q_scale = 20.f, .softcap = 50.f, .scale = 1.f / 16},
      {.name = "d256_softcap_win512_f16", .seqs = {{500, 2000}, {64, 64}}, .num_q_heads = 4, .num_kv_heads = 1,
       .head_dim = 256, .dtype = f16, .q_scale = 10.f, .window = 512, .softcap = 50.f, .scale = 1.f / 16},
      {.name = "d256_sinks_win100_g4", .seqs = {{300, 1000}, {100, 100}, {5, 2}}, .num_q_heads = 4,
       .num_kv_heads = 1, .head_dim = 256, .window = 100, .sinks = random_sinks(4, 6)},
  };
}

// Each case on the public launcher, the mma.sync kernel's default and (bf16) every tile variant.
TEST(AttentionPrefill, HeadDim256EveryVariant) {
  int device = 0, smem_optin = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), cudaSuccess);
  for (PrefillCase c : head_dim_256_cases()) {
    std::vector<std::pair<PrefillKernel, int>> runs = {{PrefillKernel::kLauncher, -1}, {PrefillKernel::kFa2, -1}};
    if (c.dtype == DType::kBF16)  // fp16 compiles variant 0 only; 128-row tiles need > 99 KiB
      for (int v = 0; v < cuda::detail::prefill_num_variants(256); ++v)
        if (cuda::detail::prefill_variant_smem_bytes(256, v) <= size_t(smem_optin)) runs.push_back({PrefillKernel::kFa2, v});
    for (const auto& [kernel, v] : runs) {
      c.kernel = kernel;
      c.variant = v;
      const CheckResult r = run_and_check(c, seed_of(c.name, v + 1));
      std::printf("%s\n", r.message.c_str());
      EXPECT_TRUE(r.ok) << r.message;
    }
  }
  std::vector<uint16_t> a, b;  // determinism
  const PrefillCase c = head_dim_256_cases()[2];
  ASSERT_TRUE(run_and_check(c, 7, &a).ok);
  ASSERT_TRUE(run_and_check(c, 7, &b).ok);
  EXPECT_EQ(a, b);
}

TEST(AttentionPrefill, RejectsUnsupportedArguments) {
  // Fake but aligned device pointers: every check fires before anything is launched.
  auto* fake = reinterpret_cast<int32_t*>(uintptr_t(256));
  PagedAttentionArgs a{.num_seqs = 1, .cu_q_lens = fake, .kv_lens = fake, .block_table = fake,
                       .max_blocks_per_seq = 1, .num_q_heads = 4, .num_kv_heads = 2, .head_dim = 96,
                       .scale = 0.1f};
  EXPECT_THROW(cuda::attention_prefill(a, 8, fake, fake, fake, fake, nullptr, DType::kBF16, nullptr),
               Error);
  a.head_dim = 128;
  EXPECT_THROW(cuda::attention_prefill(a, 8, fake, fake, fake, fake, nullptr, DType::kF32, nullptr),
               Error);
  EXPECT_THROW(cuda::detail::attention_prefill_variant(1, a, 8, fake, fake, fake, fake, nullptr,
                                                       DType::kF16, nullptr),
               Error);
  // The Hopper kernel: fp16 compiles variant 0 only, and off Hopper it is refused outright.
  EXPECT_THROW(cuda::detail::attention_prefill_sm90(1, a, 8, fake, fake, fake, fake, nullptr,
                                                    DType::kF16, nullptr),
               Error);
  EXPECT_THROW(cuda::detail::attention_prefill_sm90(0, a, 8, fake, fake, fake, fake, nullptr,
                                                    DType::kF32, nullptr),
               Error);
  a.head_dim = 256;  // the Hopper kernel serves 64 and 128 only
  EXPECT_THROW(cuda::detail::attention_prefill_sm90(0, a, 8, fake, fake, fake, fake, nullptr,
                                                    DType::kBF16, nullptr),
               Error);
  a.head_dim = 128;
  // Fresh K/V rows whose row stride is shorter than a token's kv heads (or not a multiple of 8).
  const cuda::FreshKv short_rows{.k = fake, .v = fake, .k_row_stride = 3, .v_row_stride = 256};
  EXPECT_THROW(cuda::detail::attention_prefill_sm90(std::max(cuda::detail::prefill_sm90_contig_variant(128), 0), a,
                                                    8, fake, fake, fake, fake, nullptr, DType::kBF16, nullptr,
                                                    &short_rows),
               Error);
  a.num_kv_heads = 3;
  EXPECT_THROW(cuda::attention_prefill(a, 8, fake, fake, fake, fake, nullptr, DType::kBF16, nullptr),
               Error);
}

}  // namespace
}  // namespace flashserve::test
