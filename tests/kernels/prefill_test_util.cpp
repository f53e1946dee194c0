// Problem generation, the naive 16-bit attention, and the GPU-vs-reference check for the
// prefill attention tests (see prefill_test_util.h for the tolerance policy).
#include "prefill_test_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

#include "kernels/attention_prefill.h"
#include "kernels/cuda/attention_prefill_variants.h"
#include "kernels/cpu/paged_attention_ref.h"
#include "kernels/cuda/cuda_check.h"

namespace flashserve::test {
namespace {

uint16_t to_bits(DType t, float x) {
  return t == DType::kF16 ? float_to_f16_bits(x) : float_to_bf16_bits(x);
}
uint16_t nan_bits(DType t) { return t == DType::kF16 ? 0x7e00 : 0x7fc0; }
float from_bits(DType t, uint16_t b) {
  return t == DType::kF16 ? f16_bits_to_float(b) : bf16_bits_to_float(b);
}

// A device allocation freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) { CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(bytes, 16))); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(ptr); }
};

template <class T>
void upload(DeviceBuffer& d, const std::vector<T>& h) {
  if (!h.empty()) CUDA_CHECK(cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

}  // namespace

PrefillProblem make_problem(const PrefillCase& c, uint64_t seed) {
  PrefillProblem pb;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int num_seqs = int(c.seqs.size());
  const int d = c.head_dim, hkv = c.num_kv_heads, hq = c.num_q_heads, bs = c.block_size;

  pb.cu_q_lens.assign(num_seqs + 1, 0);
  pb.kv_lens.resize(num_seqs);
  int max_blocks = 0, used_blocks = 0;
  for (int b = 0; b < num_seqs; ++b) {
    pb.cu_q_lens[b + 1] = pb.cu_q_lens[b] + c.seqs[b].q_len;
    pb.kv_lens[b] = c.seqs[b].kv_len;
    const int nb = (c.seqs[b].kv_len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, nb);
    used_blocks += nb;
  }
  pb.num_tokens = pb.cu_q_lens[num_seqs];
  // Spare blocks no sequence owns, a shuffled physical order, and table slots past each
  // sequence's blocks set to an index far out of range (any read of them is a bug).
  pb.num_blocks = used_blocks + 3;
  const int max_blocks_per_seq = max_blocks + 2;
  std::vector<int32_t> perm(pb.num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  pb.block_table.assign(size_t(num_seqs) * max_blocks_per_seq, 0x3fffffff);
  int next = 0;
  for (int b = 0; b < num_seqs; ++b) {
    const int nb = (c.seqs[b].kv_len + bs - 1) / bs;
    for (int i = 0; i < nb; ++i) pb.block_table[size_t(b) * max_blocks_per_seq + i] = perm[next++];
  }

  const size_t cache_elems = size_t(pb.num_blocks) * bs * hkv * d;
  pb.k_bits.assign(cache_elems, nan_bits(c.dtype));
  pb.v_bits.assign(cache_elems, nan_bits(c.dtype));
  pb.k.assign(cache_elems, 0.0);
  pb.v.assign(cache_elems, 0.0);
  for (int b = 0; b < num_seqs; ++b) {
    for (int t = 0; t < c.seqs[b].kv_len; ++t) {
      const int blk = pb.block_table[size_t(b) * max_blocks_per_seq + t / bs];
      for (int h = 0; h < hkv; ++h) {
        const size_t base = ((size_t(blk) * bs + t % bs) * hkv + h) * d;
        for (int i = 0; i < d; ++i) {  // N(0,1) + 0.5: not centred on zero
          const uint16_t kb = to_bits(c.dtype, normal(rng) + 0.5f);
          const uint16_t vb = to_bits(c.dtype, normal(rng) + 0.5f);
          pb.k_bits[base + i] = kb;
          pb.v_bits[base + i] = vb;
          pb.k[base + i] = from_bits(c.dtype, kb);
          pb.v[base + i] = from_bits(c.dtype, vb);
        }
      }
    }
  }
  pb.fresh_qkv_stride = int64_t(hq + 2 * hkv) * d;
  pb.fresh_k_bits.assign(size_t(pb.num_tokens) * hkv * d, nan_bits(c.dtype));
  pb.fresh_qkv_bits.assign(size_t(pb.num_tokens) * pb.fresh_qkv_stride, nan_bits(c.dtype));
  for (int b = 0; b < num_seqs; ++b) {
    if (c.seqs[b].q_len != c.seqs[b].kv_len) continue;
    for (int t = 0; t < c.seqs[b].kv_len; ++t) {
      const int blk = pb.block_table[size_t(b) * max_blocks_per_seq + t / bs];
      const size_t src = (size_t(blk) * bs + t % bs) * hkv * d, row = size_t(pb.cu_q_lens[b] + t);
      std::copy_n(&pb.k_bits[src], size_t(hkv) * d, &pb.fresh_k_bits[row * hkv * d]);
      std::copy_n(&pb.v_bits[src], size_t(hkv) * d,
                  &pb.fresh_qkv_bits[row * pb.fresh_qkv_stride + size_t(hq + hkv) * d]);
    }
  }
  const size_t q_elems = size_t(pb.num_tokens) * hq * d;
  pb.q_bits.resize(q_elems);
  pb.q.resize(q_elems);
  for (size_t i = 0; i < q_elems; ++i) {
    pb.q_bits[i] = to_bits(c.dtype, c.q_scale * normal(rng) + 0.25f);
    pb.q[i] = from_bits(c.dtype, pb.q_bits[i]);
  }

  pb.args = {.num_seqs = num_seqs, .cu_q_lens = pb.cu_q_lens.data(), .kv_lens = pb.kv_lens.data(),
             .block_table = pb.block_table.data(), .max_blocks_per_seq = max_blocks_per_seq, .block_size = bs,
             .num_q_heads = hq, .num_kv_heads = hkv, .head_dim = d,
             .scale = c.scale > 0.f ? c.scale : 1.f / std::sqrt(float(d)), .causal = c.causal,
             .window = c.window, .softcap = c.softcap};
  pb.sinks = c.sinks;
  if (!pb.sinks.empty()) pb.args.sinks = pb.sinks.data();
  return pb;
}

void naive_attention_16bit(const PrefillProblem& pb, DType dtype, std::vector<double>& out) {
  const PagedAttentionArgs& a = pb.args;
  const int d = a.head_dim, group = a.num_q_heads / a.num_kv_heads;
  const float c = a.scale * 1.4426950408889634f;
  out.assign(size_t(pb.num_tokens) * a.num_q_heads * d, 0.0);
  std::vector<float> logits, o(d);
  auto row_ptr = [&](const std::vector<double>& cache, int b, int t, int h) {
    const int blk = a.block_table[size_t(b) * a.max_blocks_per_seq + t / a.block_size];
    return &cache[((size_t(blk) * a.block_size + t % a.block_size) * a.num_kv_heads + h) * d];
  };
  for (int b = 0; b < a.num_seqs; ++b) {
    const int q0 = a.cu_q_lens[b], q_len = a.cu_q_lens[b + 1] - q0, kv_len = a.kv_lens[b];
    for (int i = 0; i < q_len; ++i) {
      const int pos = kv_len - q_len + i;
      const int visible = a.causal ? std::min(kv_len, std::max(0, pos + 1)) : kv_len;
      const int first = a.window > 0 ? std::clamp(pos - a.window + 1, 0, visible) : 0;
      for (int h = 0; h < a.num_q_heads; ++h) {
        const size_t row = size_t(q0 + i) * a.num_q_heads + h;
        const double* q = &pb.q[row * d];
        if (visible == first) continue;  // out stays 0 (with a sink too: it carries no value)
        logits.resize(visible);
        // A sink joins the max and the denominator (kernels/paged_attention.h).
        const float sink = a.sinks ? a.sinks[h] * 1.4426950408889634f : -std::numeric_limits<float>::infinity();
        float m = sink;
        for (int t = first; t < visible; ++t) {
          const double* k = row_ptr(pb.k, b, t, h / group);
          float dot = 0.f;
          for (int x = 0; x < d; ++x) dot += float(q[x]) * float(k[x]);
          logits[t] = a.softcap > 0.f ? a.softcap * 1.4426950408889634f * std::tanh(dot * a.scale / a.softcap)
                                      : dot * c;
          m = std::max(m, logits[t]);
        }
        float sum = a.sinks ? std::exp2(sink - m) : 0.f;
        std::fill(o.begin(), o.end(), 0.f);
        for (int t = first; t < visible; ++t) {
          const float p = std::exp2(logits[t] - m);
          sum += p;
          const float p16 = round_to(dtype, p);
          const double* v = row_ptr(pb.v, b, t, h / group);
          for (int x = 0; x < d; ++x) o[x] += p16 * float(v[x]);
        }
        for (int x = 0; x < d; ++x) out[row * d + x] = round_to(dtype, o[x] / sum);
      }
    }
  }
}

const char* kernel_name(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kLauncher: return "launcher";
    case PrefillKernel::kFa2: return "fa2";
    case PrefillKernel::kSm90: return "sm90";
    case PrefillKernel::kSm90Contig: return "sm90_contig";
  }
  return "?";
}

CheckResult run_and_check(const PrefillCase& c, uint64_t seed, std::vector<uint16_t>* out_bits) {
  CheckResult res;
  std::ostringstream msg;
  const PrefillProblem pb = make_problem(c, seed);
  const PagedAttentionArgs& ha = pb.args;
  const int d = c.head_dim, hq = c.num_q_heads;
  const size_t out_elems = size_t(pb.num_tokens) * hq * d;
  const size_t lse_elems = size_t(pb.num_tokens) * hq;
  constexpr size_t kCanary = 64;  // elements past the end that must stay untouched

  DeviceBuffer d_cu((ha.num_seqs + 1) * sizeof(int32_t)), d_kv(ha.num_seqs * sizeof(int32_t) + 4);
  DeviceBuffer d_bt(pb.block_table.size() * sizeof(int32_t) + 4);
  DeviceBuffer d_q(pb.q_bits.size() * 2), d_k(pb.k_bits.size() * 2), d_v(pb.v_bits.size() * 2);
  DeviceBuffer d_out((out_elems + kCanary) * 2), d_lse((lse_elems + kCanary) * 4);
  DeviceBuffer d_fresh_k(pb.fresh_k_bits.size() * 2), d_fresh_qkv(pb.fresh_qkv_bits.size() * 2);
  DeviceBuffer d_sinks(pb.sinks.size() * sizeof(float));
  upload(d_cu, pb.cu_q_lens);
  upload(d_kv, pb.kv_lens);
  upload(d_bt, pb.block_table);
  upload(d_q, pb.q_bits);
  upload(d_k, pb.k_bits);
  upload(d_v, pb.v_bits);
  upload(d_fresh_k, pb.fresh_k_bits);
  upload(d_fresh_qkv, pb.fresh_qkv_bits);
  upload(d_sinks, pb.sinks);
  const cuda::FreshKv fresh{.k = d_fresh_k.ptr,
                            .v = d_fresh_qkv.as<uint16_t>() + int64_t(hq + ha.num_kv_heads) * d,
                            .k_row_stride = int64_t(ha.num_kv_heads) * d,
                            .v_row_stride = pb.fresh_qkv_stride};
  // Poison: NaN everywhere (0xffff is a NaN in both 16-bit formats and 0xffffffff in fp32).
  CUDA_CHECK(cudaMemset(d_out.ptr, 0xff, (out_elems + kCanary) * 2));
  CUDA_CHECK(cudaMemset(d_lse.ptr, 0xff, (lse_elems + kCanary) * 4));

  PagedAttentionArgs da = ha;
  da.cu_q_lens = d_cu.as<int32_t>();
  da.kv_lens = d_kv.as<int32_t>();
  da.block_table = d_bt.as<int32_t>();
  if (da.sinks) da.sinks = d_sinks.as<float>();
  float* lse = d_lse.as<float>();
  switch (c.kernel) {
    case PrefillKernel::kLauncher:
      cuda::attention_prefill(da, pb.num_tokens, d_q.ptr, d_k.ptr, d_v.ptr, d_out.ptr, lse, c.dtype,
                              nullptr, &fresh);
      break;
    case PrefillKernel::kFa2:
      if (c.variant < 0) {
        cuda::detail::attention_prefill_fa2(da, pb.num_tokens, d_q.ptr, d_k.ptr, d_v.ptr, d_out.ptr,
                                            lse, c.dtype, nullptr);
      } else {
        cuda::detail::attention_prefill_variant(c.variant, da, pb.num_tokens, d_q.ptr, d_k.ptr,
                                                d_v.ptr, d_out.ptr, lse, c.dtype, nullptr);
      }
      break;
    case PrefillKernel::kSm90:
      cuda::detail::attention_prefill_sm90(std::max(c.variant, 0), da, pb.num_tokens, d_q.ptr,
                                           d_k.ptr, d_v.ptr, d_out.ptr, lse, c.dtype, nullptr);
      break;
    case PrefillKernel::kSm90Contig: {
      const int v = c.variant >= 0             ? c.variant
                    : c.dtype == DType::kBF16 ? cuda::detail::prefill_sm90_contig_variant(d)
                                              : 0;
      cuda::detail::attention_prefill_sm90(v, da, pb.num_tokens, d_q.ptr, d_k.ptr, d_v.ptr, d_out.ptr,
                                           lse, c.dtype, nullptr, &fresh);
      break;
    }
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> got_bits(out_elems + kCanary);
  std::vector<float> got_lse(lse_elems + kCanary);
  CUDA_CHECK(cudaMemcpy(got_bits.data(), d_out.ptr, got_bits.size() * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(got_lse.data(), d_lse.ptr, got_lse.size() * 4, cudaMemcpyDeviceToHost));

  // The fp64 reference and the naive bound depend only on the problem (case name and seed), and
  // each problem runs on several kernels: computed once per problem.
  struct Reference {
    std::vector<double> out, lse, naive;
  };
  static std::map<std::pair<std::string, uint64_t>, Reference> cache;
  Reference& rf = cache[{c.name, seed}];
  if (rf.out.empty()) {
    rf.out.resize(out_elems);
    rf.lse.resize(lse_elems);
    ref::paged_attention<double>(ha, pb.q.data(), pb.k.data(), pb.v.data(), rf.out.data(),
                                 rf.lse.data());
    naive_attention_16bit(pb, c.dtype, rf.naive);
  }
  const std::vector<double>&ref_out = rf.out, &ref_lse = rf.lse, &naive = rf.naive;

  double max_ref = 0, naive_err = 0, err = 0, lse_err = 0;
  size_t worst = 0;
  int bad = 0;
  auto fail = [&](const std::string& what) {
    res.ok = false;
    if (++bad <= 5) msg << "  " << what << "\n";
  };
  for (size_t i = 0; i < out_elems; ++i) {
    max_ref = std::max(max_ref, std::abs(ref_out[i]));
    naive_err = std::max(naive_err, std::abs(naive[i] - ref_out[i]));
    const double g = from_bits(c.dtype, got_bits[i]);
    if (!std::isfinite(g)) {
      fail("out[" + std::to_string(i) + "] not written (or not finite)");
      continue;
    }
    const double e = std::abs(g - ref_out[i]);
    if (e > err) err = e, worst = i;
  }
  const double tol = kErrFactor * naive_err + kFloorUlps * unit_roundoff(c.dtype) * max_ref;
  if (err > tol) {
    std::ostringstream w;
    w << "out max abs err " << err << " > tol " << tol << " at " << worst << " (got "
      << from_bits(c.dtype, got_bits[worst]) << ", ref " << ref_out[worst] << ")";
    fail(w.str());
  }
  for (size_t i = 0; i < lse_elems; ++i) {
    const double r = ref_lse[i], g = got_lse[i];
    if (std::isinf(r)) {
      if (!(std::isinf(g) && g < 0)) fail("lse[" + std::to_string(i) + "] should be -inf, got " + std::to_string(g));
      const size_t o0 = i * d;  // an empty row's output is exactly 0
      for (int x = 0; x < d; ++x)
        if (got_bits[o0 + x] != 0 && from_bits(c.dtype, got_bits[o0 + x]) != 0.0)
          fail("out of empty row " + std::to_string(i) + " not zero");
      continue;
    }
    const double e = std::abs(g - r);
    lse_err = std::max(lse_err, std::isfinite(e) ? e : 1e30);
    if (!(e <= kLseAbsTol + kLseRelTol * std::abs(r)))
      fail("lse[" + std::to_string(i) + "] = " + std::to_string(g) + ", ref " + std::to_string(r));
  }
  for (size_t i = 0; i < kCanary; ++i) {
    if (got_bits[out_elems + i] != 0xffff) fail("out written past the end");
    uint32_t u;
    std::memcpy(&u, &got_lse[lse_elems + i], 4);
    if (u != 0xffffffffu) fail("lse written past the end");
  }
  msg << "  [" << c.name << " " << kernel_name(c.kernel) << " v" << c.variant << "] tokens " << pb.num_tokens << " max_err " << err
      << " naive_err " << naive_err << " tol " << tol << " lse_err " << lse_err
      << (bad ? " (" + std::to_string(bad) + " failures)" : std::string());
  res.message = msg.str();
  if (out_bits) {
    got_bits.resize(out_elems);
    *out_bits = std::move(got_bits);
  }
  return res;
}

}  // namespace flashserve::test
