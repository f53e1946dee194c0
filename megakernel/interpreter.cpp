// interpret_decode_step: each MegaOp in f32 over the step's activation buffers, in the order
// run_queues gives (any order the counters allow gives the same numbers).
#include "megakernel/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "megakernel/schedule.h"

namespace flashserve {
namespace {

struct Buffers {
  std::vector<float> x, qkv, partial, attn, act, logits;
};

float rstd(const float* x, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  return float(1.0 / std::sqrt(ss / n + double(eps)));
}

// rows [r0, r1) of w [*, k] times the batch rows of `in` [batch, k] (each scaled by g when
// given, and the product by its row's rstd): out(b, r, value).
template <class Out>
void gemv(const float* w, int64_t r0, int64_t r1, int64_t k, const float* in, const float* g,
          const float* scale, int batch, Out out) {
  for (int b = 0; b < batch; ++b)
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = w + r * k;
      const float* xb = in + b * k;
      float acc = 0.f;
      for (int64_t i = 0; i < k; ++i) acc += wr[i] * (g ? xb[i] * g[i] : xb[i]);
      out(b, r, scale ? acc * scale[b] : acc);
    }
}

void head_norm(float* v, const float* w, int d, float eps) {
  const float inv = rstd(v, d, eps);
  for (int i = 0; i < d; ++i) v[i] = v[i] * inv * w[i];
}

void rope(float* v, const float* inv_freq, int pos, int d) {
  for (int i = 0; i < d / 2; ++i) {
    const double a = double(pos) * double(inv_freq[i]);
    const float c = float(std::cos(a)), s = float(std::sin(a));
    const float x1 = v[i], x2 = v[i + d / 2];
    v[i] = x1 * c - x2 * s;
    v[i + d / 2] = x2 * c + x1 * s;
  }
}

void attention(const MegaDims& d, const MegaCpuLayer& L, const MegaCpuModel& m,
               const MegaCpuStep& s, const MegaInstr& in, bool merges, Buffers& B) {
  const int hd = d.head_dim, hq = d.num_q_heads, hkv = d.num_kv_heads, S = d.num_splits;
  const int group = hq / hkv, b = in.seq, g = in.kv_head;
  const int pos = s.positions[b], kv_len = s.kv_lens[b];
  const int active = mega_active_splits(S, kv_len);  // splits past it hold no keys
  const int chunk = (kv_len + active - 1) / active, lo = in.split * chunk,
            hi = std::min(kv_len, lo + chunk);
  const float* row = B.qkv.data() + size_t(b) * (hq + 2 * hkv) * hd;
  std::vector<float> k(row + (hq + g) * hd, row + (hq + g + 1) * hd);
  const float* v = row + (hq + hkv + g) * hd;
  if (d.qk_norm) head_norm(k.data(), L.k_norm, hd, d.eps);
  rope(k.data(), m.inv_freq, pos, hd);
  const int slot = s.slots[b];
  if (lo <= pos && pos < hi && slot >= 0) {
    std::copy(k.begin(), k.end(), L.k_cache + (size_t(slot) * hkv + g) * hd);
    std::copy(v, v + hd, L.v_cache + (size_t(slot) * hkv + g) * hd);
  }
  auto cached = [&](const float* cache, int j) {
    const int blk = s.block_table[b * s.max_blocks_per_seq + j / s.block_size];
    return cache + ((size_t(blk) * s.block_size + j % s.block_size) * hkv + g) * hd;
  };
  for (int h = g * group; h < (g + 1) * group && in.split < active; ++h) {
    std::vector<float> q(row + h * hd, row + (h + 1) * hd), o(size_t(hd), 0.f);
    if (d.qk_norm) head_norm(q.data(), L.q_norm, hd, d.eps);
    rope(q.data(), m.inv_freq, pos, hd);
    float mx = -std::numeric_limits<float>::infinity(), sum = 0.f;
    for (int j = lo; j < hi; ++j) {
      const float* kj = j == pos ? k.data() : cached(L.k_cache, j);
      const float* vj = j == pos ? v : cached(L.v_cache, j);
      float sc = 0.f;
      for (int i = 0; i < hd; ++i) sc += q[i] * kj[i];
      sc *= d.attention_scale;
      const float mn = std::max(mx, sc), a = std::exp(mx - mn), p = std::exp(sc - mn);
      sum = sum * a + p;
      for (int i = 0; i < hd; ++i) o[i] = o[i] * a + p * vj[i];
      mx = mn;
    }
    float* part = B.partial.data() + ((size_t(b) * hq + h) * S + in.split) * (hd + 1);
    for (int i = 0; i < hd; ++i) part[i] = sum > 0.f ? o[i] / sum : 0.f;
    part[hd] = sum > 0.f ? mx + std::log(sum) : -std::numeric_limits<float>::infinity();
  }
  if (!merges) return;
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const float* part = B.partial.data() + (size_t(b) * hq + h) * S * (hd + 1);
    float top = -std::numeric_limits<float>::infinity();
    for (int t = 0; t < active; ++t) top = std::max(top, part[t * (hd + 1) + hd]);
    float* out = B.attn.data() + (size_t(b) * hq + h) * hd;
    float den = 0.f;
    std::fill(out, out + hd, 0.f);
    for (int t = 0; t < active; ++t) {
      const float lse = part[t * (hd + 1) + hd];
      if (lse == -std::numeric_limits<float>::infinity()) continue;
      const float wgt = std::exp(lse - top);
      den += wgt;
      for (int i = 0; i < hd; ++i) out[i] += wgt * part[t * (hd + 1) + i];
    }
    for (int i = 0; i < hd && den > 0.f; ++i) out[i] /= den;
  }
}

}  // namespace

std::vector<float> interpret_decode_step(const MegaProgram& p, const MegaCpuModel& m,
                                         const MegaCpuStep& s) {
  const MegaDims& d = p.dims;
  FS_CHECK(int(m.layers.size()) == d.num_layers, "megakernel interpreter: ", m.layers.size(),
           " layers for a ", d.num_layers, "-layer program");
  const int nb = d.batch, H = d.hidden, I = d.intermediate, hd = d.head_dim;
  const int qkv_rows = (d.num_q_heads + 2 * d.num_kv_heads) * hd, attn_k = d.num_q_heads * hd;
  Buffers B;
  B.x.assign(size_t(nb) * H, 0.f);
  B.qkv.assign(size_t(nb) * qkv_rows, 0.f);
  B.partial.assign(size_t(nb) * d.num_q_heads * d.num_splits * (hd + 1), 0.f);
  B.attn.assign(size_t(nb) * attn_k, 0.f);
  B.act.assign(size_t(nb) * I, 0.f);
  B.logits.assign(size_t(nb) * d.vocab, 0.f);
  std::vector<float> scale(static_cast<size_t>(nb), 1.f);
  auto norm_scale = [&]() {
    for (int b = 0; b < nb; ++b) scale[size_t(b)] = rstd(B.x.data() + size_t(b) * H, H, d.eps);
    return scale.data();
  };
  run_queues(p, [&](const MegaInstr& in, bool merges) {
    const MegaCpuLayer& L = m.layers[size_t(in.layer)];
    switch (MegaOp(in.op)) {
      case MegaOp::kEmbed:
        for (int b = in.begin; b < in.end; ++b)
          std::copy_n(m.embed + size_t(s.tokens[b]) * H, H, B.x.data() + size_t(b) * H);
        break;
      case MegaOp::kQkv:
        gemv(L.wqkv, in.begin, in.end, H, B.x.data(), L.input_norm, norm_scale(), nb,
             [&](int b, int64_t r, float v) {
               B.qkv[size_t(b) * qkv_rows + r] = v + (L.bqkv ? L.bqkv[r] : 0.f);
             });
        break;
      case MegaOp::kAttention: attention(d, L, m, s, in, merges, B); break;
      case MegaOp::kOProj:
        gemv(L.wo, in.begin, in.end, attn_k, B.attn.data(), nullptr, nullptr, nb,
             [&](int b, int64_t r, float v) { B.x[size_t(b) * H + r] += v; });
        break;
      case MegaOp::kGateUp: {
        std::vector<float> gate(size_t(nb) * I);
        const float* sc = norm_scale();
        gemv(L.w_gate_up, in.begin, in.end, H, B.x.data(), L.post_norm, sc, nb,
             [&](int b, int64_t r, float v) { gate[size_t(b) * I + r] = v; });
        gemv(L.w_gate_up, I + in.begin, I + in.end, H, B.x.data(), L.post_norm, sc, nb,
             [&](int b, int64_t r, float up) {
               const float gv = gate[size_t(b) * I + (r - I)];
               B.act[size_t(b) * I + (r - I)] = gv / (1.f + std::exp(-gv)) * up;
             });
        break;
      }
      case MegaOp::kDown:
        gemv(L.w_down, in.begin, in.end, I, B.act.data(), nullptr, nullptr, nb,
             [&](int b, int64_t r, float v) { B.x[size_t(b) * H + r] += v; });
        break;
      case MegaOp::kLmHead:
        gemv(m.lm_head, in.begin, in.end, H, B.x.data(), m.final_norm, norm_scale(), nb,
             [&](int b, int64_t r, float v) { B.logits[size_t(b) * d.vocab + r] = v; });
        break;
    }
  });
  return B.logits;
}

}  // namespace flashserve
