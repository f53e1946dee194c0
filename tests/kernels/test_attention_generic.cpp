// The generic paged attention kernel (kernels/attention_generic.h) against its CPU twin,
// ref::paged_attention in double (kernels/cpu/paged_attention_ref.h): a ragged batch of prefill
// chunks (with and without a cached prefix) and decodes over shuffled cache blocks, head dims
// the fast kernels skip (8, 32, 96) and one they cover (64), GQA and MHA, block sizes 16 and 12,
// and a sequence of 253 keys (more than the block's 128 threads); sliding windows (of 1 key,
// ragged, covering the sequence) and soft-capping at Gemma's head_dim 256; sinks. Outputs start as NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/attention_generic.h"
#include "kernels/cpu/paged_attention_ref.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {
namespace {

struct Shape {
  int d, hq, hkv, bs;
};

// A ragged batch of prefill chunks (with and without a cached prefix) and decodes over shuffled
// cache blocks, on the kernel and on the double twin.
void check_against_twin(Shape sh, std::mt19937& rng, int window = 0, float softcap = 0.f,
                        std::vector<int> q_lens = {5, 1, 19, 1, 3}, std::vector<int> cached = {0, 30, 3, 60, 250},
                        std::vector<float> sinks = {}) {  // [hq] sink logits, empty = none
  const auto [d, hq, hkv, bs] = sh;
  const int seqs = int(q_lens.size());
  std::vector<int32_t> cu = {0}, kv_lens;
  int max_blocks = 0, max_kv = 0;
  for (int s = 0; s < seqs; ++s) {
    cu.push_back(cu.back() + q_lens[s]);
    kv_lens.push_back(cached[s] + q_lens[s]);
    max_blocks = std::max(max_blocks, (kv_lens[s] + bs - 1) / bs);
    max_kv = std::max(max_kv, kv_lens[s]);
  }
  int num_blocks = 0;
  for (int s = 0; s < seqs; ++s) num_blocks += (kv_lens[s] + bs - 1) / bs;
  std::vector<int32_t> perm(static_cast<size_t>(num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(size_t(seqs) * max_blocks, -1);
  int next = 0;
  for (int s = 0; s < seqs; ++s)
    for (int b = 0; b < (kv_lens[s] + bs - 1) / bs; ++b) table[size_t(s) * max_blocks + b] = perm[next++];
  const int n = cu.back();
  const size_t cache_size = size_t(num_blocks) * bs * hkv * d, q_size = size_t(n) * hq * d;
  const std::vector<float> q = random_bf16(q_size, rng, -1.f, 2.f);
  const std::vector<float> kc = random_bf16(cache_size, rng, -1.f, 2.f), vc = random_bf16(cache_size, rng, -2.f, 1.f);
  Dev<uint16_t> dq(to_bf16(q)), dkc(to_bf16(kc)), dvc(to_bf16(vc)), dout(q_size);
  Dev<int32_t> dcu(cu), dkv(kv_lens), dtable(table);
  Dev<float> dsinks(sinks);
  dout.poison();
  PagedAttentionArgs a{.num_seqs = seqs, .cu_q_lens = dcu.ptr, .kv_lens = dkv.ptr, .block_table = dtable.ptr,
                       .max_blocks_per_seq = max_blocks, .block_size = bs, .num_q_heads = hq,
                       .num_kv_heads = hkv, .head_dim = d, .scale = float(1.0 / std::sqrt(double(d))),
                       .causal = true, .window = window, .softcap = softcap,
                       .sinks = sinks.empty() ? nullptr : dsinks.ptr};
  cuda::paged_attention_generic_bf16(a, n, dq.ptr, dkc.ptr, dvc.ptr, dout.ptr, nullptr, max_kv);
  a.cu_q_lens = cu.data();
  a.kv_lens = kv_lens.data();
  a.block_table = table.data();
  a.sinks = sinks.empty() ? nullptr : sinks.data();
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const std::vector<double> qd = wide(q), kd = wide(kc), vd = wide(vc);
  std::vector<double> out(q_size);
  ref::paged_attention<double>(a, qd.data(), kd.data(), vd.data(), out.data(), nullptr);
  std::printf("head_dim %d, block_size %d, window %d, softcap %g%s: ", d, bs, window, softcap,
              sinks.empty() ? "" : ", sinks");
  expect_close(from_bf16(dout.get()), std::vector<float>(out.begin(), out.end()), kBf16Tol,
               "paged_attention_generic");
}

TEST(AttentionGenericKernel, MatchesTwin) {
  std::mt19937 rng(61);
  for (Shape sh : {Shape{8, 8, 4, 16}, {32, 4, 2, 12}, {96, 6, 6, 16}, {64, 8, 2, 16}}) check_against_twin(sh, rng);
}

// Windows of 1 key, ragged (not a multiple of the block), shorter than a chunk, covering every
// sequence; soft-capping alone and windowed; Gemma 3's shape (head_dim 256, 4 q heads over 1).
TEST(AttentionGenericKernel, SlidingWindowAndSoftcap) {
  std::mt19937 rng(62);
  for (int window : {1, 7, 13, 300}) check_against_twin({96, 6, 2, 16}, rng, window);
  check_against_twin({256, 4, 1, 16}, rng, 0, 50.f);
  check_against_twin({256, 4, 1, 16}, rng, 512, 0.f, {1, 700, 1}, {3000, 100, 511});
  check_against_twin({32, 4, 2, 12}, rng, 9, 2.f);
}

// Sinks (gpt-oss): random per-head logits (a sink counted twice, or not at all, moves outputs by
// tens of percent), GQA, with a window, and a sink far above the scores (outputs ~e^-30 of their
// no-sink size, so an ignored sink shows).
TEST(AttentionGenericKernel, Sinks) {
  std::mt19937 rng(63);
  const std::vector<float> sinks = random_sinks(8, 63);
  check_against_twin({96, 8, 2, 16}, rng, 0, 0.f, {5, 1, 19, 1, 3}, {0, 30, 3, 60, 250}, sinks);
  check_against_twin({96, 8, 2, 16}, rng, 7, 0.f, {5, 1, 19, 1, 3}, {0, 30, 3, 60, 250}, sinks);
  check_against_twin({32, 8, 8, 12}, rng, 0, 0.f, {5, 1, 19}, {0, 30, 3}, std::vector<float>(8, 30.f));
}

}  // namespace
}  // namespace flashserve::test
