// The CPU reference attention against a direct softmax over contiguous K/V (causal, sliding
// windows, soft-capping, sinks), a window's alignment for a chunk split into pieces, and the state
// merge against attention over the union of two key sets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention_state.h"
#include "kernels/cpu/paged_attention_ref.h"

namespace flashserve {
namespace {

struct Problem {
  int q_len, kv_len, hq, hkv, d, block_size;
  bool causal;
  int window = 0;        // 0: every key
  double softcap = 0.0;  // 0: off
  double scale = 0.0;    // 0: 1 / sqrt(d)
};

double scale_of(const Problem& p) { return p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(p.d)); }

// Direct computation for one sequence with contiguous K/V [kv_len, hkv, d]; natural exp. Sinks
// [hq] (or nullptr) as transformers' gpt-oss eager attention has them: the sink is one more logit
// column of the row, the softmax runs over all columns, and the sink's column is dropped.
void direct(const Problem& p, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, std::vector<double>& out, std::vector<double>& lse2,
            const std::vector<float>* sinks = nullptr) {
  const double scale = scale_of(p);
  out.assign(size_t(p.q_len) * p.hq * p.d, 0.0);
  lse2.assign(size_t(p.q_len) * p.hq, -INFINITY);
  for (int i = 0; i < p.q_len; ++i)
    for (int h = 0; h < p.hq; ++h) {
      int kvh = h / (p.hq / p.hkv);
      const int pos = p.kv_len - p.q_len + i;
      int visible = p.causal ? std::clamp(pos + 1, 0, p.kv_len) : p.kv_len;
      int first = p.window > 0 ? std::clamp(pos - p.window + 1, 0, visible) : 0;
      if (visible == first && !sinks) continue;
      std::vector<double> s(visible - first);
      for (int t = first; t < visible; ++t) {
        double dot = 0;
        for (int c = 0; c < p.d; ++c)
          dot += q[(size_t(i) * p.hq + h) * p.d + c] * k[(size_t(t) * p.hkv + kvh) * p.d + c];
        s[t - first] = p.softcap > 0 ? p.softcap * std::tanh(dot * scale / p.softcap) : dot * scale;
      }
      if (sinks) s.push_back((*sinks)[h]);  // the last column; its value row is never read
      double m = *std::max_element(s.begin(), s.end()), z = 0;
      for (double x : s) z += std::exp(x - m);
      for (int t = first; t < visible; ++t)
        for (int c = 0; c < p.d; ++c)
          out[(size_t(i) * p.hq + h) * p.d + c] +=
              std::exp(s[t - first] - m) / z * v[(size_t(t) * p.hkv + kvh) * p.d + c];
      lse2[size_t(i) * p.hq + h] = (m + std::log(z)) / std::log(2.0);
    }
}

// One sequence of random q, K and V scattered into a cache with a shuffled block table and NaN in
// every unused slot: the reference against direct() (sinks: [hq] or nullptr).
void check_against_direct(const Problem& p, std::mt19937& rng, const std::vector<float>* sinks = nullptr) {
  std::normal_distribution<double> nd(0.5, 1.0);
  std::vector<double> q(size_t(p.q_len) * p.hq * p.d), k(size_t(p.kv_len) * p.hkv * p.d),
      v(k.size());
  for (auto* vec : {&q, &k, &v})
    for (double& x : *vec) x = nd(rng);
  int blocks = (p.kv_len + p.block_size - 1) / p.block_size;
  int pool = blocks + 3;
  std::vector<int32_t> table(pool);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  size_t row = size_t(p.hkv) * p.d;
  std::vector<double> kc(size_t(pool) * p.block_size * row, NAN), vc(kc.size(), NAN);
  for (int t = 0; t < p.kv_len; ++t) {
    size_t dst = (size_t(table[t / p.block_size]) * p.block_size + t % p.block_size) * row;
    std::copy_n(&k[t * row], row, &kc[dst]);
    std::copy_n(&v[t * row], row, &vc[dst]);
  }
  PagedAttentionArgs a;
  int32_t cu[2] = {0, p.q_len}, kv_len = p.kv_len;
  a.num_seqs = 1;
  a.cu_q_lens = cu;
  a.kv_lens = &kv_len;
  a.block_table = table.data();
  a.max_blocks_per_seq = pool;
  a.block_size = p.block_size;
  a.num_q_heads = p.hq;
  a.num_kv_heads = p.hkv;
  a.head_dim = p.d;
  a.scale = float(scale_of(p));
  a.causal = p.causal;
  a.window = p.window;
  a.softcap = float(p.softcap);
  a.sinks = sinks ? sinks->data() : nullptr;
  std::vector<double> out(q.size(), NAN), lse(size_t(p.q_len) * p.hq, NAN), eo, el;
  ref::paged_attention<double>(a, q.data(), kc.data(), vc.data(), out.data(), lse.data());
  direct(p, q, k, v, eo, el, sinks);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], eo[i], 1e-6) << "elem " << i;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(el[i])) {
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0);
    } else {
      // The reference scales in float (a.scale); allow for that rounding.
      EXPECT_NEAR(lse[i], el[i], 1e-5 * std::max(1.0, std::abs(el[i])));
    }
  }
}

TEST(PagedAttentionRef, MatchesDirectSoftmaxWithShuffledBlocks) {
  std::mt19937 rng(7);
  const Problem cases[] = {{5, 5, 4, 2, 8, 4, true},   {3, 17, 8, 2, 16, 16, true},
                           {1, 33, 4, 4, 8, 1, true},  {6, 4, 2, 1, 8, 3, true},
                           {7, 9, 4, 1, 8, 32, false}, {1, 1, 2, 2, 4, 16, true},
                           // sliding windows: of one key, shorter than a chunk of a long
                           // sequence, longer than the sequence, non-causal, at a decode
                           {4, 9, 2, 1, 8, 4, true, 1},       {6, 17, 4, 2, 8, 4, true, 3},
                           {5, 5, 4, 2, 8, 4, true, 64},      {7, 9, 4, 1, 8, 32, false, 4},
                           {1, 33, 4, 4, 8, 1, true, 5},
                           // soft-capping (Gemma 2: cap 50, scale 1/sqrt(256)), alone and windowed
                           {3, 17, 8, 2, 16, 16, true, 0, 50.0, 1.0 / 16},
                           {3, 17, 8, 2, 16, 16, true, 0, 0.5},
                           {6, 17, 4, 2, 8, 4, true, 3, 1.0}};
  for (const Problem& p : cases) check_against_direct(p, rng);
}

// Sinks (gpt-oss): random per-head logits over GQA groups, with windows (gpt-oss alternates a
// window of 128 with full attention), soft-capping, decode rows and rows that see no key (q_len >
// kv_len: those rows get out = 0 and lse = the sink's).
TEST(PagedAttentionRef, SinksMatchTheExtraLogitColumn) {
  std::mt19937 rng(19);
  std::normal_distribution<float> nd(0.f, 2.f);
  const Problem cases[] = {{5, 5, 4, 2, 8, 4, true},        {3, 17, 8, 2, 16, 16, true},
                           {1, 33, 8, 1, 8, 1, true},        {6, 4, 2, 1, 8, 3, true},
                           {7, 9, 4, 1, 8, 32, false},       {6, 17, 4, 2, 8, 4, true, 3},
                           {1, 40, 8, 2, 8, 4, true, 7},     {3, 17, 8, 2, 16, 16, true, 0, 0.5}};
  for (const Problem& p : cases) {
    std::vector<float> sinks(p.hq);
    for (float& x : sinks) x = nd(rng);
    check_against_direct(p, rng, &sinks);
    // A sink far above every score takes nearly all the weight; far below, it changes nothing.
    std::vector<float> large(p.hq, 40.f), tiny(p.hq, -1e30f);
    check_against_direct(p, rng, &large);
    check_against_direct(p, rng, &tiny);
  }
}

// One sequence of q_len queries over kv_len keys in blocks 0, 1, ... (an identity table), values
// N(mean, 1); args.scale 0.35, no window. Not copyable: args points into it.
struct OneSequence {
  int32_t cu[2], kv;
  std::vector<int32_t> table;
  std::vector<double> q, kc, vc;
  PagedAttentionArgs args;
  OneSequence(int q_len, int kv_len, int hq, int hkv, int d, int bs, double mean, uint32_t seed)
      : cu{0, q_len}, kv(kv_len), table((kv_len + bs - 1) / bs) {
    std::iota(table.begin(), table.end(), 0);
    q.resize(size_t(q_len) * hq * d);
    kc.resize(table.size() * bs * hkv * d);
    vc.resize(kc.size());
    std::mt19937 rng(seed);
    std::normal_distribution<double> nd(mean, 1.0);
    for (auto* vec : {&q, &kc, &vc})
      for (double& x : *vec) x = nd(rng);
    args = {.num_seqs = 1, .cu_q_lens = cu, .kv_lens = &kv, .block_table = table.data(),
            .max_blocks_per_seq = int(table.size()), .block_size = bs, .num_q_heads = hq, .num_kv_heads = hkv,
            .head_dim = d, .scale = 0.35f};
  }
  OneSequence(const OneSequence&) = delete;
  OneSequence& operator=(const OneSequence&) = delete;
  void run(const PagedAttentionArgs& a, double* out, double* lse) const {
    ref::paged_attention<double>(a, q.data(), kc.data(), vc.data(), out, lse);
  }
};

// A sink of -1e30 weighs exactly zero: the same bits as no sink. A sink of +40 over scores of
// order 1 leaves out ~ e^-40 of no-sink's and lse = the sink's. The sink joins each row once,
// whatever the window (a window of one key still sees the sink).
TEST(PagedAttentionRef, SinkExtremesAndWindows) {
  const int q_len = 9, hq = 4, d = 8;
  const OneSequence seq(q_len, 30, hq, 2, d, 4, 0.0, 23);
  for (int window : {0, 1, 5}) {
    PagedAttentionArgs a = seq.args;
    a.window = window;
    std::vector<double> none(seq.q.size()), none_lse(size_t(q_len) * hq), got(none.size()), got_lse(none_lse.size());
    seq.run(a, none.data(), none_lse.data());
    const std::vector<float> tiny(hq, -1e30f), large(hq, 40.f);
    a.sinks = tiny.data();
    seq.run(a, got.data(), got_lse.data());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], none[i]) << "window " << window << " elem " << i;
    for (size_t i = 0; i < none_lse.size(); ++i) ASSERT_EQ(got_lse[i], none_lse[i]);
    a.sinks = large.data();
    seq.run(a, got.data(), got_lse.data());
    const double sink_lse = double(large[0]) / std::log(2.0);
    for (size_t r = 0; r < none_lse.size(); ++r) {
      // out = none * w, w = 2^(lse_keys - lse_all): the keys' share of the denominator.
      const double lse_all = std::log2(std::exp2(none_lse[r]) + std::exp2(sink_lse));
      EXPECT_NEAR(got_lse[r], lse_all, 1e-9 * std::abs(lse_all));
      const double w = std::exp2(none_lse[r] - lse_all);
      EXPECT_LT(w, 1e-12);
      for (int c = 0; c < d; ++c) ASSERT_NEAR(got[r * d + c] / w, none[r * d + c], 1e-9) << "row " << r;
    }
  }
}

// A chunk's rows [r0, r1) are a chunk of their own whose kv_len is kv_len - (q_len - r1) (how the
// CPU backend cuts long prefills into pieces): with a window, every row must come out exactly as
// in the whole call. A window at least as long as the sequence is full attention, bit for bit.
TEST(PagedAttentionRef, WindowedPiecesMatchTheWholeChunk) {
  const int q_len = 20, kv_len = 45;
  const OneSequence seq(q_len, kv_len, 2, 1, 8, 4, 0.3, 11);
  PagedAttentionArgs a = seq.args;
  a.window = 7;
  const size_t n = seq.q.size();
  std::vector<double> whole(n, NAN), pieces(n, NAN);
  seq.run(a, whole.data(), nullptr);
  for (int r0 = 0; r0 < q_len; r0 += 6) {
    const int r1 = std::min(q_len, r0 + 6);
    int32_t pcu[2] = {r0, r1}, pkv = kv_len - (q_len - r1);
    PagedAttentionArgs pa = a;
    pa.cu_q_lens = pcu;
    pa.kv_lens = &pkv;
    seq.run(pa, pieces.data(), nullptr);
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(pieces[i], whole[i]) << "elem " << i;

  std::vector<double> full(n, NAN), wide(n, NAN);
  a.window = 0;
  seq.run(a, full.data(), nullptr);
  a.window = kv_len;
  seq.run(a, wide.data(), nullptr);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(wide[i], full[i]) << "elem " << i;
  // ...and a window of 7 really differs from full attention for the later rows.
  double diff = 0;
  for (size_t i = 0; i < n; ++i) diff = std::max(diff, std::abs(whole[i] - full[i]));
  EXPECT_GT(diff, 1e-3);
}

TEST(AttentionState, MergeOfDisjointKeySetsEqualsWhole) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  const int n = 10;
  std::vector<float> logit(n), val(n);
  for (int i = 0; i < n; ++i) logit[i] = nd(rng), val[i] = nd(rng);
  auto state = [&](int lo, int hi, float& o, float& lse) {
    float m = -INFINITY;
    for (int i = lo; i < hi; ++i) m = std::max(m, logit[i]);
    if (lo == hi) {
      o = 0, lse = -INFINITY;
      return;
    }
    float z = 0, acc = 0;
    for (int i = lo; i < hi; ++i) z += std::exp2(logit[i] - m), acc += std::exp2(logit[i] - m) * val[i];
    o = acc / z, lse = m + std::log2(z);
  };
  float o_all, l_all;
  state(0, n, o_all, l_all);
  for (int cut : {0, 3, n}) {  // cut 0 and n make one side empty (lse = -inf)
    float o[2], l[2];
    state(0, cut, o[0], l[0]);
    state(cut, n, o[1], l[1]);
    float lse = merged_lse(2, [&](int s) { return l[s]; });
    float merged = merge_weight(l[0], lse) * o[0] + merge_weight(l[1], lse) * o[1];
    EXPECT_NEAR(lse, l_all, 1e-5);
    EXPECT_NEAR(merged, o_all, 1e-5);
    EXPECT_FALSE(std::isnan(merged));
  }
  float lse_empty = merged_lse(2, [](int) { return -INFINITY; });
  EXPECT_TRUE(std::isinf(lse_empty) && lse_empty < 0);
  EXPECT_EQ(merge_weight(-INFINITY, lse_empty), 0.f);
}

}  // namespace
}  // namespace flashserve
