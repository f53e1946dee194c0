// The CPU backend's paged attention with sinks (gpt-oss): the layer's AttentionScoring reaches
// the reference through paged_attention_args, and the backend's cutting of a long prefill into
// row pieces over its threads adds each row's sink once. Against ref::paged_attention<double> on
// the same values, with and without a window; and the sinks do change the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backends/backend.h"
#include "kernels/cpu/paged_attention_ref.h"

namespace flashserve {
namespace {

TEST(CpuAttention, SinksReachEveryRowOnce) {
  const int hq = 8, hkv = 2, d = 16, bs = 16;
  const std::vector<int32_t> q_lens = {150, 1, 40}, cached = {0, 70, 20};  // a piece-cut prefill
  const int seqs = int(q_lens.size());
  std::vector<int32_t> cu = {0}, kv_lens;
  int max_blocks = 0, max_kv = 0, num_blocks = 0;
  for (int s = 0; s < seqs; ++s) {
    cu.push_back(cu.back() + q_lens[s]);
    kv_lens.push_back(cached[s] + q_lens[s]);
    max_blocks = std::max(max_blocks, (kv_lens[s] + bs - 1) / bs);
    max_kv = std::max(max_kv, kv_lens[s]);
    num_blocks += (kv_lens[s] + bs - 1) / bs;
  }
  std::vector<int32_t> table(size_t(seqs) * max_blocks, -1);
  for (int s = 0, next = 0; s < seqs; ++s)
    for (int b = 0; b < (kv_lens[s] + bs - 1) / bs; ++b) table[size_t(s) * max_blocks + b] = next++;
  const int n = cu.back();
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.3f, 1.f), sink_nd(2.f, 3.f);
  std::vector<float> q(size_t(n) * hq * d), kc(size_t(num_blocks) * bs * hkv * d), vc(kc.size()), sinks(hq);
  for (auto* v : {&q, &kc, &vc, &sinks})
    for (float& x : *v) x = v == &sinks ? sink_nd(rng) : nd(rng);

  std::unique_ptr<Backend> cpu = make_cpu_backend(4);
  auto upload = [&](DType t, const void* data, std::initializer_list<int64_t> shape) {
    Buffer b = cpu->allocate(t, shape);
    cpu->copy_from_host(b.tensor, data);
    return b;
  };
  const Buffer bq = upload(DType::kF32, q.data(), {n, hq, d});
  const Buffer bk = upload(DType::kF32, kc.data(), {num_blocks, bs, hkv, d});
  const Buffer bv = upload(DType::kF32, vc.data(), {num_blocks, bs, hkv, d});
  const Buffer bcu = upload(DType::kI32, cu.data(), {seqs + 1});
  const Buffer bkv = upload(DType::kI32, kv_lens.data(), {seqs});
  const Buffer btab = upload(DType::kI32, table.data(), {seqs, max_blocks});
  Buffer out = cpu->allocate(DType::kF32, {n, hq, d});
  const StepArgs step{.num_seqs = seqs, .num_tokens = n, .max_q_len = 150, .max_kv_len = max_kv, .block_size = bs,
                      .max_blocks_per_seq = max_blocks, .cu_q_lens = bcu.tensor, .kv_lens = bkv.tensor,
                      .block_table = btab.tensor, .host_kv_lens = kv_lens.data(), .host_cu_q_lens = cu.data()};
  const float scale = 0.25f;
  for (int window : {0, 7}) {
    std::vector<float> got(q.size()), plain(q.size());
    cpu->paged_attention(out.tensor, bq.tensor, bk.tensor, bv.tensor, step, {scale, window, 0.f, sinks.data()});
    cpu->copy_to_host(got.data(), out.tensor);
    cpu->paged_attention(out.tensor, bq.tensor, bk.tensor, bv.tensor, step, {scale, window});
    cpu->copy_to_host(plain.data(), out.tensor);

    const PagedAttentionArgs a{.num_seqs = seqs, .cu_q_lens = cu.data(), .kv_lens = kv_lens.data(),
                               .block_table = table.data(), .max_blocks_per_seq = max_blocks, .block_size = bs,
                               .num_q_heads = hq, .num_kv_heads = hkv, .head_dim = d, .scale = scale,
                               .window = window, .sinks = sinks.data()};
    auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    const std::vector<double> qd = wide(q), kd = wide(kc), vd = wide(vc);
    std::vector<double> want(q.size());
    ref::paged_attention<double>(a, qd.data(), kd.data(), vd.data(), want.data(), nullptr);
    double err = 0, moved = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      err = std::max(err, std::abs(got[i] - want[i]));
      moved = std::max(moved, std::abs(double(got[i]) - plain[i]));
    }
    EXPECT_LT(err, 1e-5) << "window " << window;
    EXPECT_GT(moved, 1e-2) << "window " << window << ": the sinks did not reach the attention";
  }
}

}  // namespace
}  // namespace flashserve
