// The CUDA backend's matmuls and attention routing against the CPU backend's ops on random
// shapes (each row and elementwise kernel is tested against its CPU twin in tests/kernels).
// Inputs are rounded to bf16 first so both backends see the same values; the CUDA result is
// bf16, so the tolerance is a few bf16 ulps of the output scale (2^-8 relative per rounding,
// plus fp32 reordering).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "backends/backend.h"
#include "core/fp8.h"
#include "kernels/cpu/fp8_matmul_ref.h"
#include "kernels/cpu/fused_decode_ref.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/gemv.h"

namespace flashserve::test {
namespace {

struct Pair {
  Buffer cpu, gpu;
};

class Ops : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(2);
  std::unique_ptr<Backend> gpu_ = make_cuda_backend(0);
  std::unique_ptr<Backend> gemv_all_ = make_cuda_backend(0, cuda::kGemvMaxRows);  // skinny kernel
  std::unique_ptr<Backend> cublas_ = make_cuda_backend(0, 0);  // cuBLASLt, the fused ops unfused
  std::mt19937 rng_{1234};

  std::vector<float> random(int64_t n, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = round_to(DType::kBF16, u(rng_));
    return v;
  }
  // A float tensor on both backends (f32 on the CPU, bf16 on the GPU) holding `v`.
  Pair make(const std::vector<float>& v, std::initializer_list<int64_t> shape) {
    Pair p{cpu_->allocate(DType::kF32, shape), gpu_->allocate(DType::kBF16, shape)};
    EXPECT_EQ(p.cpu.tensor.numel(), int64_t(v.size()));
    cpu_->copy_from_host(p.cpu.tensor, v.data());
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_bits(v[i]);
    gpu_->copy_from_host(p.gpu.tensor, b.data());
    return p;
  }
  Pair make_zero(std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return make(std::vector<float>(size_t(n), 0.f), shape);
  }
  // An int32 or f32 tensor with the same contents on both.
  Pair make_raw(DType t, const void* data, std::initializer_list<int64_t> shape) {
    Pair p{cpu_->allocate(t, shape), gpu_->allocate(t, shape)};
    cpu_->copy_from_host(p.cpu.tensor, data);
    gpu_->copy_from_host(p.gpu.tensor, data);
    return p;
  }
  std::vector<float> cpu_values(const Pair& p) {
    std::vector<float> v(size_t(p.cpu.tensor.numel()));
    cpu_->copy_to_host(v.data(), p.cpu.tensor);
    return v;
  }
  std::vector<float> gpu_values(const Pair& p) {
    std::vector<float> v(size_t(p.gpu.tensor.numel()));
    if (p.gpu.tensor.dtype == DType::kF32) {
      gpu_->copy_to_host(v.data(), p.gpu.tensor);
      return v;
    }
    std::vector<uint16_t> b(v.size());
    gpu_->copy_to_host(b.data(), p.gpu.tensor);
    for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_bits_to_float(b[i]);
    return v;
  }
  // max |gpu - cpu| <= rel * max(|cpu|, 1e-3) over the whole tensor.
  void expect_close(const Pair& p, double rel, const char* what) {
    const std::vector<float> c = cpu_values(p), g = gpu_values(p);
    double err = 0, ref = 1e-3;
    for (size_t i = 0; i < c.size(); ++i) {
      err = std::max(err, std::abs(double(g[i]) - double(c[i])));
      ref = std::max(ref, std::abs(double(c[i])));
    }
    std::printf("%-28s max abs err %.3e (max |ref| %.3e)\n", what, err, ref);
    EXPECT_LE(err, rel * ref) << what;
  }
};

constexpr double kTol = 1.0 / 64;  // 4 bf16 ulps of the largest output

TEST_F(Ops, MatmulBf16AndF32Out) {
  // m <= 16 with k % 8 == 0 goes through the skinny-matmul kernel (m on both sides of its n8
  // tiles; k with and without a partial 32-column unit; n not a multiple of its 16-row tiles);
  // the rest through cuBLASLt.
  for (auto [m, n, k] : {std::tuple{1, 64, 64}, {5, 300, 72}, {64, 512, 256}, {3, 1000, 1024},
                         {2, 130, 5632}, {4, 33, 2056}, {6, 17, 8}, {7, 96, 136}, {8, 257, 512},
                         {9, 64, 64}, {2, 50, 70}, {12, 1, 2048}, {16, 2560, 2048}, {15, 40, 24},
                         {17, 64, 64}}) {
    Pair x = make(random(int64_t(m) * k), {m, k});
    Pair w = make(random(int64_t(n) * k), {n, k});
    // The default backend (skinny kernel up to kGemvDefaultRows) and one that takes it up to
    // kGemvMaxRows; both write the same device buffers, one after the other.
    for (Backend* be : {gpu_.get(), gemv_all_.get(), cublas_.get()}) {
      Pair o = make_zero({m, n});
      gpu_->synchronize();
      cpu_->matmul(o.cpu.tensor, x.cpu.tensor, w.cpu.tensor);
      be->matmul(o.gpu.tensor, x.gpu.tensor, w.gpu.tensor);
      be->synchronize();
      expect_close(o, kTol, "matmul bf16 out");
      Pair of{cpu_->allocate(DType::kF32, {m, n}), gpu_->allocate(DType::kF32, {m, n})};
      cpu_->matmul(of.cpu.tensor, x.cpu.tensor, w.cpu.tensor);
      be->matmul(of.gpu.tensor, x.gpu.tensor, w.gpu.tensor);
      be->synchronize();
      expect_close(of, 1e-3, "matmul f32 out");
    }
  }
}

TEST_F(Ops, MatmulFp8Weights) {
  // FP8 weights (docs/FP8.md) loaded by each backend from one view: the CPU dequantizes them to
  // fp32 (the reference), the GPU keeps codes + row scales and runs the skinny kernels up to
  // m = 16 (not at all on the gemv_max_rows 0 backend) and above them, on GPUs with FP8 tensor
  // cores, the W8A8 GEMM where n and k are multiples of 16 (x quantized per row: the reference
  // then takes the same quantized x), else dequantize + the bf16 GEMM.
  int dev = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const bool fp8_cores = major > 8 || (major == 8 && minor >= 9);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> log_scale(-3.f, 1.f);
  for (auto [m, n, k] : {std::tuple{1, 64, 64}, {2, 130, 5632}, {3, 1000, 1024}, {9, 33, 2048},
                         {16, 257, 512}, {17, 64, 64}, {64, 512, 256}, {200, 2048, 5632},
                         {40, 96, 24}}) {
    std::vector<uint8_t> codes(size_t(n) * k);
    for (uint8_t& c : codes) {
      do c = uint8_t(code(rng_));
      while ((c & 0x7f) == 0x7f);
    }
    std::vector<float> scale(static_cast<size_t>(n));
    for (float& s : scale) s = std::pow(10.f, log_scale(rng_));
    TensorView view{DType::kF8E4M3, {n, k}, codes.data(), scale.data()};
    const Buffer wc = cpu_->load_weight(view);
    const std::vector<float> xv = random(int64_t(m) * k, -0.5f, 1.f);
    std::vector<float> xq(xv.size());  // x as the W8A8 GEMM sees it
    {
      std::vector<uint8_t> q(xv.size());
      std::vector<float> qs(static_cast<size_t>(m));
      ref::quantize_rows_fp8(q.data(), qs.data(), xv.data(), m, k);
      for (size_t i = 0; i < xq.size(); ++i) xq[i] = fp8_e4m3_to_float(q[i]) * qs[i / size_t(k)];
    }
    for (Backend* be : {gpu_.get(), cublas_.get()}) {
      SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " k " << k
                                      << (be == cublas_.get() ? " (gemv_max_rows 0)" : ""));
      const Buffer wg = be->load_weight(view);
      ASSERT_EQ(wg.tensor.dtype, DType::kF8E4M3);
      const bool above_skinny = be == cublas_.get() || m > cuda::kGemvMaxRows;
      const bool w8a8 = fp8_cores && above_skinny && n % 16 == 0 && k % 16 == 0;
      Pair x = make(xv, {m, k});
      const Buffer x_ref = cpu_->allocate(DType::kF32, {m, k});
      cpu_->copy_from_host(x_ref.tensor, (w8a8 ? xq : xv).data());
      for (DType out_t : {DType::kBF16, DType::kF32}) {
        Pair o{cpu_->allocate(DType::kF32, {m, n}), be->allocate(out_t, {m, n})};
        cpu_->matmul(o.cpu.tensor, x_ref.tensor, wc.tensor);
        be->matmul(o.gpu.tensor, x.gpu.tensor, wg.tensor);
        be->synchronize();
        // bf16 out, or the dequantize path's bf16 weights: the bf16 tolerance; else fp32's.
        const bool dequantized = above_skinny && !w8a8;
        expect_close(o, out_t == DType::kBF16 || dequantized ? kTol : 1e-3,
                     w8a8 ? "matmul fp8 (w8a8)" : "matmul fp8");
      }
    }
  }
}

// Values of a bf16 GPU tensor, or of an f32 one.
std::vector<float> device_values(Backend& be, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  if (t.dtype == DType::kF32) {
    be.copy_to_host(v.data(), t);
    return v;
  }
  std::vector<uint16_t> b(v.size());
  be.copy_to_host(b.data(), t);
  for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_bits_to_float(b[i]);
  return v;
}

// max |got - want| <= rel * max |want| (and no NaN: every output was poisoned first).
void expect_near_twin(const std::vector<float>& got, const std::vector<float>& want, double rel,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  double err = 0, ref = 1e-3;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << ": element " << i << " not written";
    err = std::max(err, std::abs(double(got[i]) - want[i]));
    ref = std::max(ref, std::abs(double(want[i])));
  }
  EXPECT_LE(err, rel * ref) << what << ": max abs err " << err << " of " << ref;
}

// add_rms_norm_matmul against its CPU twin run on the same bf16 inputs with bf16 intermediates:
// the fused kernel called directly wherever it runs (m <= 16, the normed rows within its shared
// memory), and the backend's op (fused where gemv_add_rms_norm_pays, else the add + norm kernel
// and the matmul), as well as the cuBLASLt backend's composition. Odd n and k (a partial
// 32-column unit, a partial 16-row tile), with and without the residual add, bf16 and f32
// outputs; the residual sum must equal the twin's bit for bit and stay unwritten without a delta.
TEST_F(Ops, AddRmsNormMatmulMatchesItsTwin) {
  const float nan = std::nanf("");
  for (auto [m, n, k] : {std::tuple{1, 2560, 2048}, {1, 37, 72}, {2, 130, 5632}, {3, 16, 8},
                         {5, 1000, 264}, {8, 257, 512}, {9, 64, 2048}, {11, 300, 72},
                         {16, 2560, 2048}, {16, 33, 4096}, {13, 20, 4096}, {17, 64, 256},
                         {33, 40, 136}}) {
    std::vector<float> xv = random(int64_t(m) * k, -2.f, 3.f), dv = random(int64_t(m) * k, -1.f, 2.f);
    std::vector<float> nv = random(k, 0.5f, 1.5f), wv = random(int64_t(n) * k);
    Pair x = make(xv, {m, k}), delta = make(dv, {m, k}), nw = make(nv, {k}), w = make(wv, {n, k});
    // 0: the kernel itself, 1: the default backend's op, 2: the cuBLASLt backend's op.
    for (int path = 0; path < 3; ++path) {
      Backend& be = path == 2 ? *cublas_ : *gpu_;
      for (int with_delta = 0; with_delta < 2; ++with_delta)
        for (DType out_t : {DType::kBF16, DType::kF32}) {
          const std::string what = str_cat("add_rms_norm_matmul m ", m, " n ", n, " k ", k, " delta ",
                                           with_delta, " ", dtype_name(out_t), " path ", path);
          Buffer out = be.allocate(out_t, {m, n}), h = be.allocate(DType::kBF16, {m, k});
          Buffer x_out = be.allocate(DType::kBF16, {m, k});
          std::vector<uint16_t> poison_h(size_t(m) * std::max(n, k), 0xFFFF);  // bf16 NaN
          std::vector<float> poison_f(size_t(m) * n, nan);
          be.copy_from_host(x_out.tensor, poison_h.data());
          be.copy_from_host(out.tensor, out_t == DType::kF32 ? static_cast<const void*>(poison_f.data())
                                                             : static_cast<const void*>(poison_h.data()));
          const void* d = with_delta ? delta.gpu.tensor.data : nullptr;
          if (path == 0) {
            if (!cuda::gemv_add_rms_norm_supported(m, k, x.gpu.tensor.data, d, x_out.tensor.data,
                                                   nw.gpu.tensor.data, w.gpu.tensor.data, out.tensor.data))
              continue;
            be.synchronize();  // the uploads ran on the backend's stream, the kernel runs on 0
            cuda::gemv_add_rms_norm_bf16(out.tensor.data, out_t == DType::kF32, x_out.tensor.data,
                                         x.gpu.tensor.data, d, nw.gpu.tensor.data, 1e-5f,
                                         w.gpu.tensor.data, m, n, k, nullptr);
            ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
          } else {
            be.add_rms_norm_matmul(out.tensor, h.tensor, x_out.tensor, x.gpu.tensor,
                                   with_delta ? delta.gpu.tensor : Tensor(), nw.gpu.tensor, 1e-5f,
                                   w.gpu.tensor);
          }
          std::vector<float> want(size_t(m) * n), want_x(size_t(m) * k);
          ref::add_rms_norm_matmul(want.data(), want_x.data(), xv.data(), with_delta ? dv.data() : nullptr,
                                   nv.data(), 1e-5f, wv.data(), m, n, k, DType::kBF16);
          expect_near_twin(device_values(be, out.tensor), want, out_t == DType::kF32 ? 2e-3 : kTol, what);
          const std::vector<float> got_x = device_values(be, x_out.tensor);
          for (size_t i = 0; i < got_x.size(); ++i) {
            if (with_delta) {
              ASSERT_EQ(got_x[i], want_x[i]) << what << ": residual element " << i;
            } else {
              ASSERT_TRUE(std::isnan(got_x[i])) << what << ": x_out written without a delta";
            }
          }
        }
    }
  }
}

// RoPE + K/V write (fused and separate) then paged attention, over a ragged batch with
// shuffled blocks, for head dims of the generic kernel (8, 32) and the fast ones (64, 128), with
// sliding windows, soft-capping and sinks; then a decode step over the same cache.
TEST_F(Ops, RopeWriteKvAttention) {
  for (auto [d, hq, hkv] : {std::tuple{8, 8, 4}, {32, 4, 2}, {64, 8, 2}, {128, 4, 4}}) {
    const int bs = 16, num_blocks = 40;
    const std::vector<int> q_lens = {5, 1, 19, 1}, cached = {0, 30, 3, 60};
    const int seqs = int(q_lens.size());
    std::vector<int32_t> cu = {0}, kv_lens, positions, slots;
    int max_blocks = 0, max_q = 0, max_kv = 0;
    for (int s = 0; s < seqs; ++s) {
      cu.push_back(cu.back() + q_lens[s]);
      kv_lens.push_back(cached[s] + q_lens[s]);
      max_blocks = std::max(max_blocks, (kv_lens[s] + bs - 1) / bs);
      max_q = std::max(max_q, q_lens[s]);
      max_kv = std::max(max_kv, kv_lens[s]);
    }
    std::vector<int32_t> perm(num_blocks);
    for (int i = 0; i < num_blocks; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng_);
    std::vector<int32_t> table(size_t(seqs) * max_blocks, -1);
    int next = 0;
    for (int s = 0; s < seqs; ++s)
      for (int b = 0; b < (kv_lens[s] + bs - 1) / bs; ++b) table[s * max_blocks + b] = perm[next++];
    for (int s = 0; s < seqs; ++s)
      for (int i = 0; i < q_lens[s]; ++i) {
        const int pos = cached[s] + i;
        positions.push_back(pos);
        slots.push_back(table[s * max_blocks + pos / bs] * bs + pos % bs);
      }
    const int n = cu.back();
    std::vector<float> inv(d / 2);
    for (int i = 0; i < d / 2; ++i) inv[i] = float(std::pow(10000.0, -2.0 * i / d));
    Pair invp = make_raw(DType::kF32, inv.data(), {d / 2});
    Pair pos = make_raw(DType::kI32, positions.data(), {n});
    Pair slot = make_raw(DType::kI32, slots.data(), {n});
    // The cache starts random: the earlier tokens' K/V.
    Pair kc = make(random(int64_t(num_blocks) * bs * hkv * d), {num_blocks, bs, hkv, d});
    Pair vc = make(random(int64_t(num_blocks) * bs * hkv * d), {num_blocks, bs, hkv, d});
    Pair qkv = make(random(int64_t(n) * (hq + 2 * hkv) * d), {n, (hq + 2 * hkv) * d});
    Pair q = make_zero({n, hq, d});
    cpu_->qkv_rope_write_kv(q.cpu.tensor, kc.cpu.tensor, vc.cpu.tensor, qkv.cpu.tensor,
                            pos.cpu.tensor, invp.cpu.tensor, slot.cpu.tensor);
    gpu_->qkv_rope_write_kv(q.gpu.tensor, kc.gpu.tensor, vc.gpu.tensor, qkv.gpu.tensor,
                            pos.gpu.tensor, invp.gpu.tensor, slot.gpu.tensor);
    expect_close(q, kTol, "qkv_rope_write_kv q");
    expect_close(kc, kTol, "qkv_rope_write_kv k cache");
    expect_close(vc, kTol, "qkv_rope_write_kv v cache");

    // The separate ops agree too.
    Pair q2 = make(random(int64_t(n) * hq * d), {n, hq, d});
    Pair k2 = make(random(int64_t(n) * hkv * d), {n, hkv, d});
    Pair v2 = make(random(int64_t(n) * hkv * d), {n, hkv, d});
    cpu_->rope(q2.cpu.tensor, k2.cpu.tensor, pos.cpu.tensor, invp.cpu.tensor);
    gpu_->rope(q2.gpu.tensor, k2.gpu.tensor, pos.gpu.tensor, invp.gpu.tensor);
    expect_close(q2, kTol, "rope q");
    expect_close(k2, kTol, "rope k");

    Pair cup = make_raw(DType::kI32, cu.data(), {seqs + 1});
    Pair kvl = make_raw(DType::kI32, kv_lens.data(), {seqs});
    Pair tab = make_raw(DType::kI32, table.data(), {seqs, max_blocks});
    // The step over one side's copies of the arrays: its chunks (cu_q_lens) of tokens rows.
    auto step_args = [&](bool gpu, const Pair& cu_q_lens, int tokens, int q_max) {
      auto on = [gpu](const Pair& p) { return gpu ? p.gpu.tensor : p.cpu.tensor; };
      return StepArgs{.num_seqs = seqs, .num_tokens = tokens, .max_q_len = q_max, .max_kv_len = max_kv,
                      .block_size = bs, .max_blocks_per_seq = max_blocks, .tokens = {}, .positions = on(pos),
                      .slot_mapping = on(slot), .cu_q_lens = on(cu_q_lens), .kv_lens = on(kvl),
                      .block_table = on(tab), .logit_rows = {}, .host_kv_lens = kv_lens.data()};
    };
    const StepArgs ab[2] = {step_args(false, cup, n, max_q), step_args(true, cup, n, max_q)};
    Pair out = make_zero({n, hq, d});
    const float scale = float(1.0 / std::sqrt(double(d)));
    // Full attention, then layers of other scorings over the same step: sliding windows (of one
    // key, ragged), soft-capping, both; the last full one again after the windowed plans; then
    // sinks (gpt-oss), full and windowed, each side reading its own copy of the per-head logits.
    struct Scored {
      AttentionScoring sc;
      bool sinks = false;
    };
    const Scored scorings[] = {{{scale}},         {{scale, 1}}, {{scale, 7}},       {{scale, 0, 2.f}},
                               {{scale, 13, 5.f}}, {{scale}},   {{scale}, true}, {{scale, 7}, true}};
    std::vector<float> sink_values = random(hq, -2.f, 4.f);
    Pair sinks = make_raw(DType::kF32, sink_values.data(), {hq});
    auto scoring = [&](const Scored& s, bool gpu) {
      AttentionScoring sc = s.sc;
      if (s.sinks) sc.sinks = (gpu ? sinks.gpu.tensor : sinks.cpu.tensor).as<float>();
      return sc;
    };
    for (const Scored& s : scorings) {
      cpu_->paged_attention(out.cpu.tensor, q.cpu.tensor, kc.cpu.tensor, vc.cpu.tensor, ab[0], scoring(s, false));
      gpu_->paged_attention(out.gpu.tensor, q.gpu.tensor, kc.gpu.tensor, vc.gpu.tensor, ab[1], scoring(s, true));
      std::printf("head_dim %d, window %d, softcap %g%s: ", d, s.sc.window, s.sc.softcap, s.sinks ? ", sinks" : "");
      expect_close(out, kTol, "paged_attention (mixed)");
    }
    // A decode step of the same sequences (split-K at head dims 64/128: a plan per window).
    std::vector<int32_t> decode_cu(size_t(seqs) + 1);
    for (int s = 0; s <= seqs; ++s) decode_cu[s] = s;
    Pair dcu = make_raw(DType::kI32, decode_cu.data(), {seqs + 1});
    const StepArgs db[2] = {step_args(false, dcu, seqs, 1), step_args(true, dcu, seqs, 1)};
    Pair dq = make(random(int64_t(seqs) * hq * d), {seqs, hq, d});
    Pair dout = make_zero({seqs, hq, d});
    for (const Scored& s : scorings) {
      cpu_->paged_attention(dout.cpu.tensor, dq.cpu.tensor, kc.cpu.tensor, vc.cpu.tensor, db[0], scoring(s, false));
      gpu_->paged_attention(dout.gpu.tensor, dq.gpu.tensor, kc.gpu.tensor, vc.gpu.tensor, db[1], scoring(s, true));
      std::printf("head_dim %d, window %d, softcap %g%s: ", d, s.sc.window, s.sc.softcap, s.sinks ? ", sinks" : "");
      expect_close(dout, kTol, "paged_attention (decode)");
    }
  }
}

}  // namespace
}  // namespace flashserve::test
