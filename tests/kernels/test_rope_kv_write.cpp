// RoPE and the KV-cache write (kernels/rope_kv_write.h) against their CPU twins
// (kernels/cpu/rope_kv_write_ref.h): positions up to 100000 (where the angle's precision
// matters), head dims 8 to 128, GQA and MHA; the K/V write bit for bit into a shuffled cache
// with a padded row (slot -1: nothing written); the fused split + RoPE + write with and without
// the fresh K rows, which must hold exactly what the cache received. Untouched cache slots keep
// their values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cpu/rope_kv_write_ref.h"
#include "kernels/rope_kv_write.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve::test {
namespace {

std::vector<float> inv_freq(int d) {
  std::vector<float> inv(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) inv[i] = float(std::pow(10000.0, -2.0 * i / d));
  return inv;
}

// n positions (one past 100000 among them) and distinct shuffled slots, the last one -1.
void positions_and_slots(int n, int num_slots, std::mt19937& rng, std::vector<int32_t>* pos,
                         std::vector<int32_t>* slots) {
  pos->resize(size_t(n));
  for (int i = 0; i < n; ++i) (*pos)[i] = int32_t(rng() % 4096);
  (*pos)[0] = 100001;
  std::vector<int32_t> all(static_cast<size_t>(num_slots));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  slots->assign(all.begin(), all.begin() + n);
  if (n > 1) slots->back() = -1;
}

TEST(RopeKvWriteKernels, RopeMatchesTwin) {
  std::mt19937 rng(51);
  for (auto [n, hq, hkv, d] : {std::tuple{1, 1, 1, 8}, {19, 8, 2, 64}, {5, 4, 4, 128}, {3, 6, 3, 32}}) {
    std::vector<int32_t> pos, slots;
    positions_and_slots(n, n, rng, &pos, &slots);
    const std::vector<float> q = random_bf16(size_t(n) * hq * d, rng, -2.f, 3.f);
    const std::vector<float> k = random_bf16(size_t(n) * hkv * d, rng, -2.f, 3.f), inv = inv_freq(d);
    Dev<uint16_t> dq(to_bf16(q)), dk(to_bf16(k));
    Dev<int32_t> dpos(pos);
    Dev<float> dinv(inv);
    cuda::rope_bf16(dq.ptr, dk.ptr, dpos.ptr, dinv.ptr, n, hq, hkv, d, nullptr);
    std::vector<float> wq = q, wk = k;
    ref::rope(wq.data(), wk.data(), pos.data(), inv.data(), n, hq, hkv, d);
    expect_close(from_bf16(dq.get()), wq, kBf16Tol, "rope q");
    expect_close(from_bf16(dk.get()), wk, kBf16Tol, "rope k");
  }
}

TEST(RopeKvWriteKernels, WriteKvMatchesTwinBitForBit) {
  std::mt19937 rng(52);
  for (auto [n, hkv, d, num_slots] : {std::tuple{1, 1, 8, 4}, {17, 2, 64, 64}, {40, 8, 128, 48}}) {
    std::vector<int32_t> pos, slots;
    positions_and_slots(n, num_slots, rng, &pos, &slots);
    const size_t row = size_t(hkv) * d;
    const std::vector<uint16_t> k = to_bf16(random_bf16(n * row, rng)), v = to_bf16(random_bf16(n * row, rng));
    std::vector<uint16_t> kc = to_bf16(random_bf16(num_slots * row, rng)), vc = to_bf16(random_bf16(num_slots * row, rng));
    Dev<uint16_t> dk(k), dv(v), dkc(kc), dvc(vc);
    Dev<int32_t> dslots(slots);
    cuda::write_kv_bf16(dkc.ptr, dvc.ptr, dk.ptr, dv.ptr, dslots.ptr, n, hkv, d, nullptr);
    ref::write_kv(kc.data(), vc.data(), k.data(), v.data(), slots.data(), n, int64_t(row) * 2, num_slots);
    EXPECT_EQ(dkc.get(), kc);
    EXPECT_EQ(dvc.get(), vc);
  }
}

TEST(RopeKvWriteKernels, QkvRopeWriteKvMatchesTwin) {
  std::mt19937 rng(53);
  for (auto [n, hq, hkv, d] : {std::tuple{1, 2, 1, 8}, {23, 8, 2, 64}, {6, 4, 4, 128}}) {
    const int num_slots = 2 * n + 3, width = (hq + 2 * hkv) * d;
    const size_t row = size_t(hkv) * d;
    std::vector<int32_t> pos, slots;
    positions_and_slots(n, num_slots, rng, &pos, &slots);
    const std::vector<float> qkv = random_bf16(size_t(n) * width, rng, -2.f, 3.f), inv = inv_freq(d);
    const std::vector<float> kc0 = random_bf16(num_slots * row, rng), vc0 = random_bf16(num_slots * row, rng);
    std::vector<float> q(size_t(n) * hq * d), kc = kc0, vc = vc0, kv_rows(2 * n * row);
    ref::qkv_rope_write_kv(q.data(), kc.data(), vc.data(), qkv.data(), pos.data(), inv.data(),
                           slots.data(), n, hq, hkv, d, num_slots, kv_rows.data());
    for (bool with_rows : {false, true}) {
      Dev<uint16_t> dq(q.size()), dkc(to_bf16(kc0)), dvc(to_bf16(vc0)), dqkv(to_bf16(qkv)), drows(n * row);
      Dev<int32_t> dpos(pos), dslots(slots);
      Dev<float> dinv(inv);
      dq.poison();
      drows.poison();
      cuda::qkv_rope_write_kv_bf16(dq.ptr, dkc.ptr, dvc.ptr, dqkv.ptr, dpos.ptr, dinv.ptr, dslots.ptr, n,
                                   hq, hkv, d, nullptr, with_rows ? drows.ptr : nullptr);
      expect_close(from_bf16(dq.get()), q, kBf16Tol, "qkv_rope_write_kv q");
      const std::vector<uint16_t> got_k = dkc.get();
      expect_close(from_bf16(got_k), kc, kBf16Tol, "qkv_rope_write_kv k cache");
      EXPECT_EQ(dvc.get(), to_bf16(vc)) << "v: copied, not turned";
      if (!with_rows) continue;
      const std::vector<uint16_t> rows = drows.get();
      for (int t = 0; t < n; ++t) {
        const std::vector<uint16_t> mine(rows.begin() + t * row, rows.begin() + (t + 1) * row);
        if (slots[t] >= 0) {
          const std::vector<uint16_t> cached(got_k.begin() + slots[t] * row, got_k.begin() + (slots[t] + 1) * row);
          EXPECT_EQ(mine, cached) << "token " << t << ": the fresh K row is the cached one";
        }
        expect_close(from_bf16(mine), std::vector<float>(kv_rows.begin() + t * row, kv_rows.begin() + (t + 1) * row),
                     kBf16Tol, "fresh k row");
      }
    }
  }
}

}  // namespace
}  // namespace flashserve::test
