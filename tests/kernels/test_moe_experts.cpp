// The CUDA backend's MoE ops (backends/cuda/cuda_moe.cpp over kernels/moe.h) against the twins
// kernels/cpu/moe_ref.h, in every expert format the backend loads: bf16 (and f32 checkpoints,
// converted), FP8 with row scales, --quantize fp8 (to_fp8 views), block-wise FP8, int4 (GPTQ-style
// groups) and int4 with act-order; each quantized format against its dequantized values
// (weights/fp8_weights.h weight_values). Batches 1, 2, 3, 8 and 16 run the fused decode kernels,
// 17, 64 and 256 the general path (permuted rows, grouped GEMM, combine; quantized experts stay
// fused up to 64). Rows from 64 to 2304 columns (several unrolled steps, partial last steps).
// Routings: softmax top-k of random logits (8 experts top-2, 60 top-4, 128 top-8), every token to
// one expert, top_k = num_experts. A decode step recorded in a CUDA graph and replayed with another
// routing gives that routing's result (no launch shape depends on the routing). Outputs are
// poisoned first.
// Tolerance: fused kernels are f32 throughout and round once (2^-8 of the output); the general
// path rounds h, act, y (and a quantized expert's weights) to bf16: relative Frobenius error
// <= 1e-2 and max error <= 3e-2 of max |ref|; a wrong expert, row or weight gives O(1).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "kernels/cpu/moe_ref.h"
#include "tests/kernels/device_test_util.h"
#include "weights/block_fp8_weights.h"
#include "weights/fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/loaded_model.h"

namespace flashserve {
namespace {

enum class Format { kBf16, kF32, kFp8, kToFp8, kBlockFp8, kInt4, kInt4ActOrder };

const char* format_name(Format f) {
  switch (f) {
    case Format::kBf16: return "bf16";
    case Format::kF32: return "f32";
    case Format::kFp8: return "fp8 rows";
    case Format::kToFp8: return "--quantize fp8";
    case Format::kBlockFp8: return "block fp8";
    case Format::kInt4: return "int4";
    case Format::kInt4ActOrder: return "int4 act-order";
  }
  return "?";
}

// Random weights of one format as the loader would give them; the views' memory lives here.
struct ExpertViews {
  std::vector<TensorView> gate, up, down;
  std::vector<std::vector<float>> gate_up_values, down_values;  // [E] dequantized, for the twin
  std::deque<std::vector<char>> bytes;

  TensorView make(Format f, int rows, int cols, const std::vector<int32_t>& perm,
                  std::mt19937& rng) {
    TensorView v;
    v.shape = {rows, cols};
    const size_t numel = size_t(rows) * cols;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const float amp = 1.f / std::sqrt(float(cols));
    auto hold = [&](size_t n) -> char* { bytes.emplace_back(n); return bytes.back().data(); };
    switch (f) {
      case Format::kBf16:
      case Format::kToFp8: {
        auto* d = reinterpret_cast<uint16_t*>(hold(numel * 2));
        for (size_t i = 0; i < numel; ++i) d[i] = float_to_bf16_bits(amp * u(rng));
        v.dtype = DType::kBF16, v.data = d, v.to_fp8 = f == Format::kToFp8;
        break;
      }
      case Format::kF32: {
        auto* d = reinterpret_cast<float*>(hold(numel * 4));
        for (size_t i = 0; i < numel; ++i) d[i] = round_to(DType::kBF16, amp * u(rng));
        v.dtype = DType::kF32, v.data = d;
        break;
      }
      case Format::kFp8: {
        auto* d = reinterpret_cast<uint8_t*>(hold(numel));
        auto* s = reinterpret_cast<float*>(hold(size_t(rows) * 4));
        for (size_t i = 0; i < numel; ++i) d[i] = float_to_fp8_e4m3(448.f * u(rng));
        for (int r = 0; r < rows; ++r) s[r] = amp / 448.f * (0.5f + 0.5f * std::fabs(u(rng)));
        v.dtype = DType::kF8E4M3, v.data = d, v.row_scale = s;
        break;
      }
      case Format::kBlockFp8: {
        auto w = std::make_shared<BlockFp8Weight>();
        w->rows = rows, w->cols = cols, w->block_rows = 32, w->block_cols = 64;
        std::vector<uint8_t> codes(numel);
        for (uint8_t& c : codes) c = float_to_fp8_e4m3(448.f * u(rng));
        w->own_codes(std::move(codes));
        w->scales.resize(size_t(w->scale_rows() * w->scale_cols()));
        for (float& s : w->scales) s = amp / 448.f * (0.25f + std::fabs(u(rng)));
        v.dtype = DType::kF32, v.block_fp8 = w;
        break;
      }
      case Format::kInt4:
      case Format::kInt4ActOrder: {
        auto w = std::make_shared<Int4Stored>();
        w->packing = Int4Packing::kRows;
        w->rows = rows, w->cols = cols, w->group_size = 32;
        std::vector<uint8_t> words(size_t(rows) * cols / 2);
        std::uniform_int_distribution<int> byte(0, 255), zero(0, 16);
        for (uint8_t& b : words) b = uint8_t(byte(rng));
        w->owned = std::make_shared<const std::vector<uint8_t>>(std::move(words));
        w->words = w->owned->data();
        w->scales.resize(size_t(w->groups()) * rows);
        w->zeros.resize(w->scales.size());
        for (size_t i = 0; i < w->scales.size(); ++i) {
          w->scales[i] = amp / 8.f * (0.5f + std::fabs(u(rng)));
          w->zeros[i] = uint8_t(zero(rng));
        }
        if (f == Format::kInt4ActOrder) w->perm = perm;
        v.dtype = DType::kI4, v.int4 = w;
        break;
      }
    }
    return v;
  }

  ExpertViews(Format f, int experts, int hidden, int inter, std::mt19937& rng) {
    for (int e = 0; e < experts; ++e) {
      // Act-order: gate and up share one permutation (so they stack packed), down has its own.
      std::vector<int32_t> p_in(hidden), p_inter(inter);
      std::iota(p_in.begin(), p_in.end(), 0);
      std::iota(p_inter.begin(), p_inter.end(), 0);
      std::shuffle(p_in.begin(), p_in.end(), rng);
      std::shuffle(p_inter.begin(), p_inter.end(), rng);
      gate.push_back(make(f, inter, hidden, p_in, rng));
      up.push_back(make(f, inter, hidden, p_in, rng));
      down.push_back(make(f, hidden, inter, p_inter, rng));
      std::vector<float> gu = weight_values(gate.back());
      const std::vector<float> uv = weight_values(up.back());
      gu.insert(gu.end(), uv.begin(), uv.end());
      gate_up_values.push_back(std::move(gu));
      down_values.push_back(weight_values(down.back()));
    }
  }
};

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routing softmax_routing(int n, int experts, int top_k, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.f, 1.5f);
  std::vector<float> logits(size_t(n) * experts);
  for (float& l : logits) l = nd(rng);
  Routing r{std::vector<int32_t>(size_t(n) * top_k), std::vector<float>(size_t(n) * top_k)};
  ref::moe_route(r.ids.data(), r.weights.data(), logits.data(), n, experts, top_k, true);
  return r;
}

// Every token to the same top_k experts, the highest ids (top_k 1: all to the last expert; top_k
// = experts: every expert, in a per-token rotated order).
Routing fixed_routing(int n, int experts, int top_k) {
  Routing r;
  for (int t = 0; t < n; ++t)
    for (int j = 0; j < top_k; ++j) {
      r.ids.push_back(top_k == experts ? (j + t) % experts : experts - 1 - j);
      r.weights.push_back(1.f / float(top_k) + 0.01f * float(j));
    }
  return r;
}

struct Case {
  const ExpertViews& views;
  int hidden, inter;
};

std::vector<float> twin(const Case& c, const std::vector<float>& x, const Routing& r, int n) {
  std::vector<const float*> gu, dn;
  for (const auto& v : c.views.gate_up_values) gu.push_back(v.data());
  for (const auto& v : c.views.down_values) dn.push_back(v.data());
  std::vector<float> out(size_t(n) * c.hidden);
  ref::moe_experts(out.data(), x.data(), r.ids.data(), r.weights.data(), gu, dn, n,
                   int(r.ids.size() / std::max(n, 1)), c.hidden, c.inter);
  return out;
}

void expect_matches(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 1e-6;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": output " << i << " not written";
    const double d = double(got[i]) - want[i];
    err2 += d * d, ref2 += double(want[i]) * want[i];
    max_err = std::max(max_err, std::fabs(d));
    max_ref = std::max(max_ref, std::fabs(double(want[i])));
  }
  const double rel = std::sqrt(err2 / std::max(ref2, 1e-30));
  EXPECT_LE(rel, 1e-2) << what;
  EXPECT_LE(max_err, 3e-2 * max_ref) << what << " (max |ref| " << max_ref << ")";
}

// Uploads x and the routing, runs moe_experts (or replays `graph`), returns out.
struct Step {
  Buffer x, ids, weights, out;
  Step(Backend& b, int n, int top_k, int hidden) {
    x = b.allocate(DType::kBF16, {n, hidden});
    ids = b.allocate(DType::kI32, {n, top_k});
    weights = b.allocate(DType::kF32, {n, top_k});
    out = b.allocate(DType::kBF16, {n, hidden});
  }
  void set(Backend& b, const std::vector<float>& xv, const Routing& r) {
    b.copy_from_host(x.tensor, test::to_bf16(xv).data());
    b.copy_from_host(ids.tensor, r.ids.data());
    b.copy_from_host(weights.tensor, r.weights.data());
    b.synchronize();
    CUDA_CHECK(cudaMemset(out.tensor.data, 0xff, out.tensor.bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void run(Backend& b, const MoeExperts& e) {
    b.moe_experts(out.tensor, x.tensor, ids.tensor, weights.tensor, e);
  }
  std::vector<float> get(Backend& b) {
    std::vector<uint16_t> h(size_t(out.tensor.numel()));
    b.copy_to_host(h.data(), out.tensor);
    return test::from_bf16(h);
  }
};

void check(Format f, int experts, int top_k, int hidden, int inter, std::mt19937& rng) {
  SCOPED_TRACE(testing::Message() << format_name(f) << ", " << experts << " experts top "
                                  << top_k << ", hidden " << hidden << " inter " << inter);
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  const ExpertViews views(f, experts, hidden, inter, rng);
  const std::shared_ptr<MoeExperts> loaded =
      backend->load_moe_experts(views.gate, views.up, views.down);
  ASSERT_EQ(loaded->num_experts, experts);
  ASSERT_EQ(loaded->hidden, hidden);
  ASSERT_EQ(loaded->intermediate, inter);
  const Case c{views, hidden, inter};
  for (int n : {1, 2, 3, 8, 16, 17, 64, 256}) {
    std::vector<Routing> routings = {softmax_routing(n, experts, top_k, rng)};
    if (n == 1 || n == 16 || n == 64) {
      routings.push_back(fixed_routing(n, experts, 1));  // one expert for all
    }
    for (size_t k = 0; k < routings.size(); ++k) {
      const Routing& r = routings[k];
      const int rk = int(r.ids.size()) / n;
      Step s(*backend, n, rk, hidden);
      const std::vector<float> x = test::random_bf16(size_t(n) * hidden, rng, -1.f, 1.5f);
      s.set(*backend, x, r);
      s.run(*backend, *loaded);
      expect_matches(s.get(*backend), twin(c, x, r, n),
                     "n " + std::to_string(n) + " routing " + std::to_string(k));
    }
  }
}

TEST(MoeExperts, Bf16MatchesTheTwin) {
  std::mt19937 rng(61);
  check(Format::kBf16, 8, 2, 256, 96, rng);    // Mixtral-like routing
  check(Format::kBf16, 60, 4, 128, 64, rng);   // Qwen1.5-MoE-like routing
  check(Format::kBf16, 128, 8, 256, 96, rng);  // Qwen3-MoE-like routing
}

TEST(MoeExperts, CheckpointDtypesAndFp8MatchTheTwin) {
  std::mt19937 rng(67);
  check(Format::kF32, 8, 2, 128, 64, rng);
  check(Format::kFp8, 16, 4, 256, 96, rng);
  check(Format::kToFp8, 16, 4, 256, 96, rng);
}

TEST(MoeExperts, BlockFp8MatchesItsDequantizedValues) {
  std::mt19937 rng(71);
  check(Format::kBlockFp8, 16, 4, 256, 96, rng);
}

TEST(MoeExperts, Int4MatchesItsDequantizedValues) {
  std::mt19937 rng(73);
  check(Format::kInt4, 16, 4, 256, 96, rng);
  check(Format::kInt4ActOrder, 8, 2, 256, 128, rng);
}

// Rows longer than one step of the kernels' unrolled loads, and not a multiple of it (bf16 and FP8:
// 1024 columns a step, int4: 2048); block-FP8 gate/up whose 520 rows are not whole 32-row blocks
// load as bf16 beside a block-FP8 down (one projection's format need not be the other's).
TEST(MoeExperts, LongRowsPartialStepsAndMixedFormats) {
  std::mt19937 rng(101);
  check(Format::kBf16, 8, 2, 1088, 520, rng);
  check(Format::kFp8, 8, 2, 1088, 520, rng);
  check(Format::kBlockFp8, 8, 2, 1088, 520, rng);
  check(Format::kInt4, 8, 2, 2304, 544, rng);
}

TEST(MoeExperts, TopKEqualsNumExperts) {
  std::mt19937 rng(79);
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  const ExpertViews views(Format::kBf16, 4, 128, 64, rng);
  const auto loaded = backend->load_moe_experts(views.gate, views.up, views.down);
  const Case c{views, 128, 64};
  for (int n : {1, 5, 16, 33, 256}) {
    for (const Routing& r : {softmax_routing(n, 4, 4, rng), fixed_routing(n, 4, 4)}) {
      Step s(*backend, n, 4, 128);
      const std::vector<float> x = test::random_bf16(size_t(n) * 128, rng);
      s.set(*backend, x, r);
      s.run(*backend, *loaded);
      expect_matches(s.get(*backend), twin(c, x, r, n), "n " + std::to_string(n));
    }
  }
}

// A step recorded once replays correctly for any routing: nothing in it depends on the ids.
TEST(MoeExperts, GraphReplaysAnyRouting) {
  std::mt19937 rng(83);
  for (Format f : {Format::kBf16, Format::kInt4}) {
    std::unique_ptr<Backend> backend = make_cuda_backend(0);
    const ExpertViews views(f, 32, 256, 96, rng);
    const auto loaded = backend->load_moe_experts(views.gate, views.up, views.down);
    const Case c{views, 256, 96};
    for (int n : {1, 4, 64}) {
      SCOPED_TRACE(testing::Message() << format_name(f) << " n " << n);
      Step s(*backend, n, 4, 256);
      const std::vector<float> x = test::random_bf16(size_t(n) * 256, rng);
      s.set(*backend, x, softmax_routing(n, 32, 4, rng));
      s.run(*backend, *loaded);  // eager first: sizes the workspace
      backend->synchronize();
      backend->begin_capture();
      s.run(*backend, *loaded);
      const std::shared_ptr<void> graph = backend->end_capture();
      for (int round = 0; round < 3; ++round) {
        const Routing r = round == 2 ? fixed_routing(n, 32, 4) : softmax_routing(n, 32, 4, rng);
        s.set(*backend, x, r);
        backend->replay(graph);
        expect_matches(s.get(*backend), twin(c, x, r, n), "replay " + std::to_string(round));
      }
    }
  }
}

TEST(MoeExperts, RouteAndSharedGateMatchTheTwins) {
  std::mt19937 rng(89);
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  const int n = 37, experts = 60, top_k = 4, hidden = 72;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> logits(size_t(n) * experts);
  for (float& l : logits) l = nd(rng);
  std::vector<int32_t> want_ids(size_t(n) * top_k);
  std::vector<float> want_w(want_ids.size());
  ref::moe_route(want_ids.data(), want_w.data(), logits.data(), n, experts, top_k, false);
  Buffer l = backend->allocate(DType::kF32, {n, experts});
  Buffer ids = backend->allocate(DType::kI32, {n, top_k});
  Buffer w = backend->allocate(DType::kF32, {n, top_k});
  backend->copy_from_host(l.tensor, logits.data());
  backend->moe_route(ids.tensor, w.tensor, l.tensor, top_k, false);
  std::vector<int32_t> got_ids(want_ids.size());
  std::vector<float> got_w(want_w.size());
  backend->copy_to_host(got_ids.data(), ids.tensor);
  backend->copy_to_host(got_w.data(), w.tensor);
  EXPECT_EQ(got_ids, want_ids);
  for (size_t i = 0; i < got_w.size(); ++i) EXPECT_NEAR(got_w[i], want_w[i], 1e-6) << i;

  const std::vector<float> out0 = test::random_bf16(size_t(n) * hidden, rng);
  const std::vector<float> y = test::random_bf16(size_t(n) * hidden, rng);
  std::vector<float> gate(static_cast<size_t>(n));
  for (float& g : gate) g = round_to(DType::kBF16, 3.f * nd(rng));
  for (bool gate_bf16 : {false, true}) {
    Buffer o = backend->allocate(DType::kBF16, {n, hidden});
    Buffer yb = backend->allocate(DType::kBF16, {n, hidden});
    Buffer g = backend->allocate(gate_bf16 ? DType::kBF16 : DType::kF32, {n, 1});
    backend->copy_from_host(o.tensor, test::to_bf16(out0).data());
    backend->copy_from_host(yb.tensor, test::to_bf16(y).data());
    if (gate_bf16)
      backend->copy_from_host(g.tensor, test::to_bf16(gate).data());
    else
      backend->copy_from_host(g.tensor, gate.data());
    backend->add_sigmoid_gated(o.tensor, yb.tensor, g.tensor);
    std::vector<float> want = out0;
    ref::add_sigmoid_gated(want.data(), y.data(), gate.data(), n, hidden);
    std::vector<uint16_t> h(want.size());
    backend->copy_to_host(h.data(), o.tensor);
    test::expect_close(test::from_bf16(h), want, test::kBf16Tol,
                       gate_bf16 ? "gate bf16" : "gate f32");
  }
}

TEST(MoeExperts, BadInputIsAnError) {
  std::mt19937 rng(97);
  std::unique_ptr<Backend> backend = make_cuda_backend(0);
  ExpertViews views(Format::kBf16, 4, 128, 64, rng);
  views.down[2].shape = {128, 32};  // one expert's down disagrees
  EXPECT_THROW(backend->load_moe_experts(views.gate, views.up, views.down), Error);
  std::vector<TensorView> fewer(views.up.begin(), views.up.end() - 1);
  EXPECT_THROW(backend->load_moe_experts(views.gate, fewer, views.down), Error);
}

}  // namespace
}  // namespace flashserve
