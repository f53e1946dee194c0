// Cascade decode attention on the CUDA backend (kernels/attention_cascade.h through
// Backend::paged_attention), against plain split-K decode and the double CPU reference:
//  - decode steps whose sequences share leading blocks (groups of 20, 5 and singles; head_dim 64
//    with 8 q heads per kv head, and head_dim 128), outputs poisoned with NaN first;
//  - the same attention recorded in a CUDA graph over 22 layers' caches (TinyLlama's shape of the
//    prefix-cache benchmark, 64 sequences sharing 1,024 tokens, then smaller groups, shorter
//    prefixes and other part sizes) replays to the eager result; its time per layer is printed
//    beside plain decode's;
//  - the whole forward pass (a small random model, CUDA graphs on): decode logits with cascade
//    equal those without, up to bf16 rounding (NMSE bound of test_cuda_backend.cpp).
// Tolerances: tests/kernels/decode_tolerance.h's for bf16 (the cascade path rounds the prefix
// state and the suffix state to bf16 before the merge: two roundings instead of one).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>

#include "backends/backend.h"
#include "core/dtype.h"
#include "kernels/cpu/paged_attention_ref.h"
#include "model/cascade_plan.h"
#include "model/model_runner.h"
#include "tests/kernels/decode_tolerance.h"
#include "tests/model/cascade_test_util.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

struct Shape {
  int hq, hkv, d;
};

// One decode step on the device: the plan's arrays, a K/V cache per layer, and q.
struct DeviceStep {
  StepPlan step;
  CascadePlan plan;
  std::vector<Buffer> keep;  // every allocation
  StepArgs plain, cascade;   // the same step without and with the cascade arrays
  std::vector<Tensor> k, v;  // [layers]
  Tensor q, out;
  std::vector<double> k_host, v_host;  // the caches' bf16-rounded values (every layer's)
  std::vector<double> q_host;
};

Tensor upload_i32(Backend& be, DeviceStep& ds, const std::vector<int32_t>& h,
                  std::initializer_list<int64_t> shape) {
  Buffer b = be.allocate(DType::kI32, shape);
  if (!h.empty()) be.copy_from_host(b.tensor, h.data());
  ds.keep.push_back(b);
  return b.tensor;
}

// bf16 bits of `values` uploaded into a new tensor of `shape`; `rounded` gets the values the
// device sees.
Tensor upload_bf16(Backend& be, DeviceStep& ds, const std::vector<float>& values,
                   std::initializer_list<int64_t> shape, std::vector<double>* rounded) {
  std::vector<uint16_t> bits(values.size());
  rounded->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = float_to_bf16_bits(values[i]);
    (*rounded)[i] = bf16_bits_to_float(bits[i]);
  }
  Buffer b = be.allocate(DType::kBF16, shape);
  be.copy_from_host(b.tensor, bits.data());
  ds.keep.push_back(b);
  return b.tensor;
}

// The default plan configuration, except that any sharing pays (small cases).
CascadeConfig any_sharing(int part_blocks = CascadeConfig{}.part_blocks) {
  CascadeConfig cfg;
  cfg.enabled = true;
  cfg.min_saved_bytes = 1;
  cfg.kv_bytes_per_token = 1;  // set by the model; here the step is planned directly
  cfg.part_blocks = part_blocks;
  return cfg;
}

std::unique_ptr<DeviceStep> make_device_step(Backend& be, const SharedStepSpec& spec,
                                             const Shape& sh, int layers, uint32_t seed,
                                             const CascadeConfig& cfg = any_sharing()) {
  auto ds = std::make_unique<DeviceStep>();
  StepPlan& s = ds->step;
  const int blocks = make_shared_step(spec, seed, &s) + 1;
  ds->plan.build(s, spec.block_size, cfg);
  EXPECT_TRUE(ds->plan.active());
  const int n = s.num_seqs, bs = spec.block_size;
  StepArgs& a = ds->plain;
  a.num_seqs = a.num_tokens = n;
  a.max_q_len = 1;
  a.max_kv_len = s.max_kv_len;
  a.block_size = bs;
  a.max_blocks_per_seq = s.max_blocks_per_seq;
  a.cu_q_lens = upload_i32(be, *ds, s.cu_q_lens, {n + 1});
  a.kv_lens = upload_i32(be, *ds, s.kv_lens, {n});
  a.block_table = upload_i32(be, *ds, s.block_table, {n, s.max_blocks_per_seq});
  a.host_kv_lens = s.kv_lens.data();
  ds->cascade = a;
  const CascadePlan& p = ds->plan;
  CascadeStepArgs& c = ds->cascade.cascade;
  c.num_parts = p.num_parts;
  c.num_prefix_rows = p.num_prefix_rows;
  c.part_stride = p.part_stride;
  c.suffix_stride = p.suffix_stride;
  c.merge_stride = p.merge_stride;
  c.part_cu_rows = upload_i32(be, *ds, p.part_cu_rows, {p.num_parts + 1});
  c.part_kv_lens = upload_i32(be, *ds, p.part_kv_lens, {p.num_parts});
  c.part_block_table = upload_i32(be, *ds, p.part_block_table, {p.num_parts, p.part_stride});
  c.prefix_q_rows = upload_i32(be, *ds, p.prefix_q_rows, {p.num_prefix_rows});
  c.suffix_kv_lens = upload_i32(be, *ds, p.suffix_kv_lens, {n});
  c.suffix_block_table = upload_i32(be, *ds, p.suffix_block_table, {n, p.suffix_stride});
  c.merge_rows = upload_i32(be, *ds, p.merge_rows, {n, p.merge_stride});
  c.host_suffix_kv_lens = p.suffix_kv_lens.data();
  // Every layer's cache holds the same values (drawing them is the slow part) in its own memory.
  const size_t cache = size_t(blocks) * bs * sh.hkv * sh.d;
  const std::vector<float> k = random_values(cache, seed * 100), v = random_values(cache, seed * 100 + 1);
  for (int l = 0; l < layers; ++l) {
    ds->k.push_back(upload_bf16(be, *ds, k, {blocks, bs, sh.hkv, sh.d}, &ds->k_host));
    ds->v.push_back(upload_bf16(be, *ds, v, {blocks, bs, sh.hkv, sh.d}, &ds->v_host));
  }
  ds->q = upload_bf16(be, *ds, random_values(size_t(n) * sh.hq * sh.d, seed + 7), {n, sh.hq, sh.d}, &ds->q_host);
  Buffer out = be.allocate(DType::kBF16, {n, sh.hq, sh.d});
  ds->keep.push_back(out);
  ds->out = out.tensor;
  return ds;
}

std::vector<double> download(Backend& be, const Tensor& t) {
  std::vector<uint16_t> bits(size_t(t.numel()));
  be.copy_to_host(bits.data(), t);
  std::vector<double> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = bf16_bits_to_float(bits[i]);
  return v;
}

void poison(Backend& be, const Tensor& t) {
  const std::vector<uint16_t> nan(size_t(t.numel()), 0x7fc0);
  be.copy_from_host(t, nan.data());
}

// ||a - ref||_F / ||ref||_F and max |a - ref| / max |ref|; NaN anywhere fails both.
std::pair<double, double> errors(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0, max_err = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = std::isnan(a[i]) ? INFINITY : std::abs(a[i] - ref[i]);
    num += e * e;
    den += ref[i] * ref[i];
    max_err = std::max(max_err, e);
    max_ref = std::max(max_ref, std::abs(ref[i]));
  }
  return {std::sqrt(num / den), max_err / max_ref};
}

TEST(CascadeAttention, MatchesPlainDecodeAndTheReference) {
  auto be = make_cuda_backend(0);
  const SharedStepSpec spec{{20, 5, 1, 1, 1}, {37, 9, 0, 2, 0}, 150, 16};
  for (const Shape sh : {Shape{32, 4, 64}, Shape{32, 8, 128}, Shape{8, 8, 64}}) {
    SCOPED_TRACE(::testing::Message() << "hq " << sh.hq << " hkv " << sh.hkv << " d " << sh.d);
    auto ds = make_device_step(*be, spec, sh, 1, 5);
    const float scale = 1.f / std::sqrt(float(sh.d));
    const StepPlan& s = ds->step;
    const PagedAttentionArgs ra{.num_seqs = s.num_seqs, .cu_q_lens = s.cu_q_lens.data(),
                                .kv_lens = s.kv_lens.data(), .block_table = s.block_table.data(),
                                .max_blocks_per_seq = s.max_blocks_per_seq, .block_size = 16,
                                .num_q_heads = sh.hq, .num_kv_heads = sh.hkv, .head_dim = sh.d,
                                .scale = scale, .causal = true};
    std::vector<double> ref(ds->q_host.size());
    ref::paged_attention<double>(ra, ds->q_host.data(), ds->k_host.data(), ds->v_host.data(),
                                 ref.data(), nullptr);
    const DecodeTolerance tol = decode_tolerance(DType::kBF16);
    std::vector<double> results[2];
    for (int use_cascade : {0, 1}) {
      poison(*be, ds->out);
      be->paged_attention(ds->out, ds->q, ds->k[0], ds->v[0], use_cascade ? ds->cascade : ds->plain,
                          scale);
      results[use_cascade] = download(*be, ds->out);
      const auto [frob, max_frac] = errors(results[use_cascade], ref);
      std::printf("d%d %s: rel Frobenius %.2e, max abs / max |ref| %.2e\n", sh.d,
                  use_cascade ? "cascade" : "plain  ", frob, max_frac);
      EXPECT_LE(frob, tol.frob_rel) << (use_cascade ? "cascade" : "plain");
      EXPECT_LE(max_frac, tol.max_abs_frac) << (use_cascade ? "cascade" : "plain");
    }
    EXPECT_LE(errors(results[1], results[0]).second, tol.max_abs_frac) << "cascade vs plain";
  }
}

// Replays `layers` attention calls (one per layer's cache) from a recorded graph; seconds per
// replay, the median of `reps` timed after a warm-up.
double time_graph(Backend& be, DeviceStep& ds, const StepArgs& a, float scale, int layers, int reps) {
  be.begin_capture();
  for (int l = 0; l < layers; ++l) be.paged_attention(ds.out, ds.q, ds.k[size_t(l)], ds.v[size_t(l)], a, scale);
  const std::shared_ptr<void> graph = be.end_capture();
  std::vector<double> t;
  for (int r = 0; r < reps + 3; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    be.replay(graph);
    be.synchronize();
    if (r >= 3) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

TEST(CascadeAttention, GraphReplayEqualsEagerAndTimes) {
  // First the prefix-cache benchmark's decode: 64 sequences sharing a 1,024-token system prompt
  // (64 blocks), each with its own question and reply so far (1..192 tokens), TinyLlama's heads,
  // 22 layers (their caches together exceed L2, as in the model); then smaller groups, shorter
  // prefixes and other part sizes, and Llama-2-7B's heads (16 KiB of K/V per token and layer,
  // 4 layers: already past L2), for where cascade pays (docs/PREFIX_CACHE.md).
  auto be = make_cuda_backend(0);
  const float scale = 0.125f;
  struct Timed {
    int members, shared_blocks, part_blocks;
    Shape shape{32, 4, 64};
    int layers = 22, own_tokens = 192;
  };
  const Shape llama7b{32, 32, 128};
  const Timed cases[] = {{64, 64, 8},  {64, 64, 4},  {64, 64, 16},  {64, 64, 64},
                         {32, 64, 8},  {16, 64, 8},  {8, 64, 8},    {4, 64, 8},
                         {2, 64, 8},   {64, 16, 8},  {16, 16, 8},   {4, 16, 8},
                         {64, 128, 8}, {64, 128, 16}, {64, 64, 8, llama7b, 4, 64},
                         {16, 64, 8, llama7b, 4, 64}, {4, 16, 8, llama7b, 4, 64}};
  std::printf("decode attention per layer, block 16, the layers' graph replayed:\n");
  for (const Timed& t : cases) {
    const Shape sh = t.shape;
    SCOPED_TRACE(::testing::Message() << t.members << " sharing " << t.shared_blocks << " blocks, parts of "
                                      << t.part_blocks << ", hkv " << sh.hkv << " d " << sh.d);
    auto ds = make_device_step(*be, SharedStepSpec{{t.members}, {t.shared_blocks}, t.own_tokens, 16}, sh,
                               t.layers, 11, any_sharing(t.part_blocks));
    const float sc = sh.d == 64 ? scale : 1.f / std::sqrt(float(sh.d));
    // Eager first (sizes every workspace before recording), on the last layer's cache.
    be->paged_attention(ds->out, ds->q, ds->k.back(), ds->v.back(), ds->cascade, sc);
    const std::vector<double> eager = download(*be, ds->out);
    const double cascade_s = time_graph(*be, *ds, ds->cascade, sc, t.layers, 50);
    EXPECT_EQ(download(*be, ds->out), eager) << "the graph's last layer differs from the eager call";
    be->paged_attention(ds->out, ds->q, ds->k.back(), ds->v.back(), ds->plain, sc);
    EXPECT_LE(errors(eager, download(*be, ds->out)).second,
              decode_tolerance(DType::kBF16).max_abs_frac);
    const double plain_s = time_graph(*be, *ds, ds->plain, sc, t.layers, 50);
    std::printf("  hq %d hkv %2d d%-3d %2d sequences sharing %4d tokens (+1..%d own), parts of %2d "
                "blocks: plain %6.1f us, cascade %6.1f us (x%.2f; %d parts, %d prefix rows)\n",
                sh.hq, sh.hkv, sh.d, t.members, t.shared_blocks * 16, t.own_tokens, t.part_blocks,
                plain_s / t.layers * 1e6, cascade_s / t.layers * 1e6, plain_s / cascade_s,
                ds->plan.num_parts, ds->plan.num_prefix_rows);
  }
}

TEST(CascadeAttention, ForwardPassWithGraphsMatchesPlainAttention) {
  auto [model, plain, cascade] = cascade_pair("cuda", 16384);
  const auto want = run_shared_prefix(*plain, 12, 96, 21, 40, 3);
  const auto got = run_shared_prefix(*cascade, 12, 96, 21, 40, 3);
  EXPECT_EQ(cascade->cascade_steps(), 40u);
  EXPECT_GT(cascade->graphs_recorded(), 0u) << "decode steps ran from graphs";
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  std::printf("forward with cascade vs plain, 40 decode steps of 12 sequences: NMSE %.2e\n", num / den);
  EXPECT_LE(num / den, 1e-3);
  EXPECT_LE(max_rel_diff(got, want), 0.05);
}

}  // namespace
}  // namespace flashserve::test
