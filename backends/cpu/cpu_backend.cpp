// The CPU backend: plain fp32 loops over host memory. Weights are converted to f32 at load (FP8
// and int4 weights dequantized: the reference the CUDA kernels are checked against, docs/FP8.md,
// docs/QUANTIZATION.md).
// Matmul is split over output columns (weight rows) across a small thread pool, attention over
// ranges of query rows, a mixture of experts over token rows; each output element
// is computed by the same code whatever the split, so results
// do not depend on the thread count, the batch or the chunking. Attention is ref::paged_attention.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/thread_pool.h"
#include "kernels/cpu/argmax_ref.h"
#include "kernels/cpu/elementwise_ref.h"
#include "kernels/cpu/embedding_gather_ref.h"
#include "kernels/cpu/moe_ref.h"
#include "kernels/cpu/mxfp4_ref.h"
#include "kernels/cpu/norms_ref.h"
#include "kernels/cpu/paged_attention_ref.h"
#include "kernels/cpu/rope_kv_write_ref.h"
#include "parallel/reduction_order.h"
#include "weights/fp8_weights.h"
#include "weights/packed_views.h"

namespace flashserve {
namespace {

// R token rows against one weight row, eight independent partial sums per row so the compiler
// vectorises without reassociating on its own. Each output gets the same arithmetic whatever R
// is, so results do not depend on how many tokens share the step.
template <int R>
inline void dot_rows(const float* x, int64_t ldx,  // [R, k] with row stride ldx
                     const float* w, int64_t k,    // [k]
                     float* out, int64_t ldo) {    // [R] with stride ldo
  float acc[R][8] = {};
  int64_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (int r = 0; r < R; ++r)
      for (int l = 0; l < 8; ++l) acc[r][l] += x[r * ldx + i + l] * w[i + l];
  for (int r = 0; r < R; ++r) {
    float tail = 0.f;
    for (int64_t t = i; t < k; ++t) tail += x[r * ldx + t] * w[t];
    const float* a = acc[r];
    out[r * ldo] = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + tail;
  }
}

// dot_rows over k cut into `slices` equal slices, the slices' results added in
// parallel/reduction_order.h's order (Backend::matmul_k_sliced); one slice is dot_rows itself.
constexpr int kMaxSlices = 64;
template <int R>
inline void dot_rows_sliced(const float* x, int64_t ldx,  // [R, k] with row stride ldx
                            const float* w, int64_t k,    // [k]
                            int slices, float* out, int64_t ldo) {  // [R] with stride ldo
  if (slices == 1) return dot_rows<R>(x, ldx, w, k, out, ldo);
  const int64_t ks = k / slices;
  float part[kMaxSlices][R];
  for (int s = 0; s < slices; ++s) dot_rows<R>(x + s * ks, ldx, w + s * ks, ks, part[s], 1);
  for (int r = 0; r < R; ++r)
    out[r * ldo] = pairwise_sum<float>(0, slices, [&](int s) { return part[s][r]; });
}

void check_same(const Tensor& a, const Tensor& b, const char* what) {
  FS_CHECK(a.numel() == b.numel(), what, ": ", a.numel(), " vs ", b.numel(), " elements");
}

// Three tensors of the same size (an elementwise op's).
void check_same(const Tensor& out, const Tensor& a, const Tensor& b, const char* what) {
  check_same(out, a, what);
  check_same(out, b, what);
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads)
      : pool_(threads > 0 ? threads : std::max(1u, std::thread::hardware_concurrency())) {}

  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::kCpu; }
  DType compute_dtype() const override { return DType::kF32; }
  size_t memory_available() const override { return size_t(2) << 30; }  // 2 GiB KV budget

  std::shared_ptr<void> allocate_bytes(size_t bytes) override {
    // 64-byte aligned (cache lines, AVX-512); size rounded up as aligned_alloc requires.
    void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    FS_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }

  Buffer load_weight(const TensorView& view) override {
    Fp8Rows fp8;  // --quantize fp8 left to the backend (TensorView::to_fp8): quantized here
    const TensorView stored = fp8_view_on_host(view, &fp8);
    // A packed (int4 or block-wise FP8) weight runs on its f32 values, dequantized here: the
    // reference the CUDA kernels' twins are checked against (docs/QUANTIZATION.md).
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> values;
    const TensorView w = unpacked_view(stored, &values);
    if (is_packed(stored)) {
      ++unpacked_weights_;
      unpacked_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    FS_CHECK(w.shape.size() >= 1 && w.shape.size() <= 4 && w.data, "bad weight view");
    Buffer b = allocate(DType::kF32, {w.numel()});
    b.tensor.ndim = int(w.shape.size());
    for (int i = 0; i < b.tensor.ndim; ++i) b.tensor.shape[i] = w.shape[i];
    float* out = b.tensor.as<float>();
    const int64_t n = w.numel();
    switch (w.dtype) {
      case DType::kF32:
        std::memcpy(out, w.data, size_t(n) * 4);
        break;
      case DType::kF16: {
        const uint16_t* in = static_cast<const uint16_t*>(w.data);
        for (int64_t i = 0; i < n; ++i) out[i] = f16_bits_to_float(in[i]);
        break;
      }
      case DType::kBF16: {
        const uint16_t* in = static_cast<const uint16_t*>(w.data);
        for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits_to_float(in[i]);
        break;
      }
      case DType::kF8E4M3: {  // the reference: the dequantized weight, decode(q) * row scale
        FS_CHECK(w.row_scale && w.shape.size() == 2, "an FP8 weight needs 2 dims and row scales");
        const uint8_t* in = static_cast<const uint8_t*>(w.data);
        const int64_t cols = w.shape[1];
        for (int64_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_float(in[i]) * w.row_scale[i / cols];
        break;
      }
      default:
        FS_THROW("weights of dtype ", dtype_name(w.dtype), " are not supported");
    }
    return b;
  }

  std::string take_conversion_report() override {
    if (unpacked_weights_ == 0) return "";
    char line[128];
    std::snprintf(line, sizeof line, "%lld packed weights dequantized to f32 in %.2f s",
                  static_cast<long long>(unpacked_weights_), unpacked_s_);
    unpacked_weights_ = 0, unpacked_s_ = 0;
    return line;
  }

  void copy_from_host(Tensor dst, const void* src) override {
    if (dst.bytes()) std::memcpy(dst.data, src, dst.bytes());
  }
  void copy_to_host(void* dst, const Tensor& src) override {
    if (src.bytes()) std::memcpy(dst, src.data, src.bytes());
  }
  void synchronize() override {}

  void embedding(Tensor out, const Tensor& token_ids, const Tensor& table) override {
    const int64_t n = token_ids.numel(), hidden = table.dim(1), vocab = table.dim(0);
    FS_CHECK(out.numel() == n * hidden, "embedding: out has ", out.numel(), " elements");
    ref::embedding(out.data, token_ids.as<int32_t>(), table.data, n, hidden * 4, vocab);
  }

  void rms_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) override {
    const int64_t hidden = weight.numel(), n = x.numel() / hidden;
    check_same(out, x, "rms_norm");
    ref::rms_norm(out.as<float>(), x.as<float>(), weight.as<float>(), n, hidden, eps);
  }

  void matmul(Tensor out, const Tensor& x, const Tensor& w) override {
    matmul_k_sliced(out, x, w, 1);
  }

  void matmul_k_sliced(Tensor out, const Tensor& x, const Tensor& w, int slices) override {
    const int64_t n = w.dim(0), k = w.dim(1), m = x.numel() / k;
    FS_CHECK(x.numel() == m * k && out.numel() == m * n, "matmul: x ", x.numel(), " out ",
             out.numel(), " for w [", n, ", ", k, "]");
    FS_CHECK(slices >= 1 && slices <= kMaxSlices && k % slices == 0, "matmul: k ", k,
             " in ", slices, " slices");
    const float* xp = x.as<float>();
    const float* wp = w.as<float>();
    float* op = out.as<float>();
    // Small products are not worth waking the workers for.
    const int chunks = m * n * k < (int64_t(1) << 16) ? 1 : pool_.size();
    pool_.run(chunks, [&](int c) {
      const int64_t j0 = n * c / chunks, j1 = n * (c + 1) / chunks;
      // Tiles: a group of weight rows (L2) against 4 token rows at a time (L1).
      constexpr int64_t kRowsW = 32, kRowsX = 4;
      for (int64_t jb = j0; jb < j1; jb += kRowsW) {
        const int64_t je = std::min(j1, jb + kRowsW);
        int64_t i = 0;
        for (; i + kRowsX <= m; i += kRowsX)
          for (int64_t j = jb; j < je; ++j)
            dot_rows_sliced<kRowsX>(xp + i * k, k, wp + j * k, k, slices, op + i * n + j, n);
        for (; i < m; ++i)
          for (int64_t j = jb; j < je; ++j)
            dot_rows_sliced<1>(xp + i * k, k, wp + j * k, k, slices, op + i * n + j, n);
      }
    });
  }

  void rope(Tensor q, Tensor k, const Tensor& positions, const Tensor& inv_freq) override {
    const int64_t n = positions.numel(), half = inv_freq.numel(), d = 2 * half;
    FS_CHECK(q.numel() % (n * d) == 0 && k.numel() % (n * d) == 0, "rope: bad q/k sizes");
    const int64_t hq = q.numel() / (n * d), hk = k.numel() / (n * d);
    ref::rope(q.as<float>(), k.as<float>(), positions.as<int32_t>(), inv_freq.as<float>(), n, hq,
              hk, d);
  }

  void add_bias(Tensor x, const Tensor& bias) override {
    const int64_t width = bias.numel(), n = width ? x.numel() / width : 0;
    FS_CHECK(width > 0 && n * width == x.numel(), "add_bias: x has ", x.numel(),
             " elements, bias ", width);
    ref::add_bias(x.as<float>(), bias.as<float>(), n, width);
  }

  void qk_norm(Tensor qkv, const Tensor& q_weight, const Tensor& k_weight, int num_q_heads,
               int num_kv_heads, float eps) override {
    FS_CHECK(qkv.ndim == 3 && qkv.dim(1) == num_q_heads + 2 * num_kv_heads &&
                 q_weight.numel() == qkv.dim(2) && k_weight.numel() == qkv.dim(2),
             "qk_norm: shapes");
    ref::qk_norm(qkv.as<float>(), q_weight.as<float>(), k_weight.as<float>(), qkv.dim(0),
                 num_q_heads, num_kv_heads, qkv.dim(2), eps);
  }

  void swiglu(Tensor out, const Tensor& gate, const Tensor& up) override {
    check_same(out, gate, up, "swiglu");
    ref::swiglu(out.as<float>(), gate.as<float>(), up.as<float>(), out.numel());
  }

  void add(Tensor out, const Tensor& a, const Tensor& b) override {
    check_same(out, a, b, "add");
    ref::add(out.as<float>(), a.as<float>(), b.as<float>(), out.numel());
  }

  void argmax_rows(Tensor ids, const Tensor& logits) override {
    FS_CHECK(logits.dtype == DType::kF32 && ids.dtype == DType::kI32 && logits.ndim == 2 &&
                 ids.numel() == logits.dim(0),
             "argmax_rows: shapes");
    ref::argmax_rows(ids.as<int32_t>(), logits.as<float>(), logits.dim(0), logits.dim(1));
  }

  // The host sampler itself, row by row: the reference the GPU sampler is tested against.
  void sample_rows(int32_t* ids, const Tensor& logits, std::span<const int64_t> rows,
                   std::span<const SampleRequest> requests) override {
    FS_CHECK(logits.dtype == DType::kF32 && logits.ndim == 2 && rows.size() == requests.size(),
             "sample_rows: shapes");
    const int64_t vocab = logits.dim(1);
    for (size_t i = 0; i < rows.size(); ++i) {
      FS_CHECK(rows[i] >= 0 && rows[i] < logits.dim(0), "sample_rows: row ", rows[i], " of ",
               logits.dim(0));
      FS_CHECK(requests[i].params != nullptr, "sample_rows: request ", i, " has no parameters");
      const float* row = logits.as<float>() + rows[i] * vocab;
      if (std::any_of(row, row + vocab, [](float v) { return std::isnan(v); })) {
        ids[i] = -1;
        continue;
      }
      SamplingParams p = *requests[i].params;
      p.logprobs = -1;  // only the token goes back
      SampleRequest q = requests[i];
      q.params = &p;
      ids[i] = sample_token({row, size_t(vocab)}, q).token;
    }
  }

  void gather_rows(Tensor out, const Tensor& x, const Tensor& row_ids) override {
    const int64_t rows = row_ids.numel(), width = out.numel() / std::max<int64_t>(rows, 1);
    const int64_t x_rows = x.numel() / std::max<int64_t>(width, 1);
    ref::gather_rows(out.data, x.data, row_ids.as<int32_t>(), rows, width * 4, x_rows);
  }

  void write_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v,
                const Tensor& slot_mapping) override {
    const int64_t n = slot_mapping.numel(), row = k.numel() / std::max<int64_t>(n, 1);
    const int64_t num_slots = k_cache.numel() / std::max<int64_t>(row, 1);
    check_same(k, v, "write_kv");
    ref::write_kv(k_cache.data, v_cache.data, k.data, v.data, slot_mapping.as<int32_t>(), n,
                  row * 4, num_slots);
  }

  void add_rms_norm(Tensor out, Tensor x, const Tensor& delta, const Tensor& weight,
                    float eps) override {
    const int64_t hidden = weight.numel(), n = x.numel() / hidden;
    check_same(x, x, delta, "add_rms_norm");
    check_same(out, x, "add_rms_norm");
    ref::add_rms_norm(out.as<float>(), x.as<float>(), x.as<float>(), delta.as<float>(),
                      weight.as<float>(), n, hidden, eps);
  }

  void qkv_rope_write_kv(Tensor q, Tensor k_cache, Tensor v_cache, const Tensor& qkv,
                         const Tensor& positions, const Tensor& inv_freq,
                         const Tensor& slot_mapping) override {
    const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k_cache.dim(2);
    const int64_t width = (hq + 2 * hkv) * d;
    FS_CHECK(qkv.numel() == n * width && positions.numel() == n && slot_mapping.numel() == n,
             "qkv_rope_write_kv: qkv has ", qkv.numel(), " elements, want ", n * width);
    kv_tmp_.resize(size_t(2 * n * hkv * d));
    ref::qkv_rope_write_kv(q.as<float>(), k_cache.as<float>(), v_cache.as<float>(), qkv.as<float>(),
                           positions.as<int32_t>(), inv_freq.as<float>(),
                           slot_mapping.as<int32_t>(), n, hq, hkv, d, k_cache.numel() / (hkv * d),
                           kv_tmp_.data());
  }

  void swiglu_fused(Tensor out, const Tensor& gate_up) override {
    const int64_t inter = out.dim(out.ndim - 1), n = out.numel() / std::max<int64_t>(inter, 1);
    FS_CHECK(gate_up.numel() == 2 * n * inter, "swiglu_fused: gate_up has ", gate_up.numel(),
             " elements, want ", 2 * n * inter);
    ref::swiglu_fused(out.as<float>(), gate_up.as<float>(), n, inter);
  }

  void geglu_fused(Tensor out, const Tensor& gate_up) override {
    const int64_t inter = out.dim(out.ndim - 1), n = out.numel() / std::max<int64_t>(inter, 1);
    FS_CHECK(gate_up.numel() == 2 * n * inter, "geglu_fused: gate_up has ", gate_up.numel(),
             " elements, want ", 2 * n * inter);
    ref::geglu_fused(out.as<float>(), gate_up.as<float>(), n, inter);
  }

  void scale(Tensor x, float factor) override { ref::scale(x.as<float>(), factor, x.numel()); }

  // Mixture of experts: kernels/cpu/moe_ref.h, rows split over the workers (each row's result
  // is the same whatever the split). The experts are the default load_moe_experts' f32 weights.
  void moe_route(Tensor expert_ids, Tensor weights, const Tensor& logits, int top_k,
                 bool renormalize) override {
    const int64_t n = logits.dim(0), experts = logits.dim(1);
    FS_CHECK(logits.dtype == DType::kF32 && expert_ids.dtype == DType::kI32 &&
                 weights.dtype == DType::kF32 && expert_ids.numel() == n * top_k &&
                 weights.numel() == n * top_k,
             "moe_route: ", n, " rows of ", experts, " f32 logits, top_k ", top_k, ": ids ",
             expert_ids.numel(), " weights ", weights.numel());
    ref::moe_route(expert_ids.as<int32_t>(), weights.as<float>(), logits.as<float>(), n,
                   int(experts), top_k, renormalize);
  }

  void moe_experts(Tensor out, const Tensor& x, const Tensor& expert_ids, const Tensor& weights,
                   const MoeExperts& e) override {
    const int64_t n = x.dim(0), hidden = e.hidden, inter = e.intermediate;
    const int top_k = int(expert_ids.numel() / std::max<int64_t>(n, 1));
    FS_CHECK(x.numel() == n * hidden && out.numel() == n * hidden &&
                 expert_ids.numel() == n * top_k && weights.numel() == n * top_k &&
                 (e.mxfp4 || (int(e.gate_up.size()) == e.num_experts &&
                              int(e.down.size()) == e.num_experts)),
             "moe_experts: x ", x.numel(), " out ", out.numel(), " for ", n, " rows of ", hidden,
             "; ", e.num_experts, " experts");
    const int chunks = int(std::min<int64_t>(n, pool_.size()));
    if (e.mxfp4) {  // gpt-oss's (kernels/cpu/mxfp4_ref.h)
      pool_.run(chunks, [&](int c) {
        const int64_t r0 = n * c / chunks, r1 = n * (c + 1) / chunks;
        ref::mxfp4_moe_experts(out.as<float>() + r0 * hidden, x.as<float>() + r0 * hidden,
                               expert_ids.as<int32_t>() + r0 * top_k,
                               weights.as<float>() + r0 * top_k, *e.mxfp4, r1 - r0, top_k);
      });
      return;
    }
    std::vector<const float*> gate_up, down;
    for (int i = 0; i < e.num_experts; ++i) {
      FS_CHECK(e.gate_up[i].dtype == DType::kF32 && e.down[i].dtype == DType::kF32 &&
                   e.gate_up[i].numel() == 2 * inter * hidden && e.down[i].numel() == hidden * inter,
               "moe_experts: expert ", i, " is not f32 [", 2 * inter, ", ", hidden, "] / [", hidden,
               ", ", inter, "]");
      gate_up.push_back(e.gate_up[i].as<float>());
      down.push_back(e.down[i].as<float>());
    }
    pool_.run(chunks, [&](int c) {
      const int64_t r0 = n * c / chunks, r1 = n * (c + 1) / chunks;
      ref::moe_experts(out.as<float>() + r0 * hidden, x.as<float>() + r0 * hidden,
                       expert_ids.as<int32_t>() + r0 * top_k, weights.as<float>() + r0 * top_k,
                       gate_up, down, r1 - r0, top_k, hidden, inter);
    });
  }

  void add_sigmoid_gated(Tensor out, const Tensor& y, const Tensor& gate_logit) override {
    const int64_t n = gate_logit.numel(), hidden = out.numel() / std::max<int64_t>(n, 1);
    FS_CHECK(gate_logit.dtype == DType::kF32 && y.numel() == out.numel() &&
                 out.numel() == n * hidden,
             "add_sigmoid_gated: out ", out.numel(), " y ", y.numel(), " gate ", n);
    ref::add_sigmoid_gated(out.as<float>(), y.as<float>(), gate_logit.as<float>(), n, hidden);
  }

  void softcap(Tensor x, float cap) override {
    FS_CHECK(cap > 0.f, "softcap: cap ", cap, " must be positive");
    ref::softcap(x.as<float>(), cap, x.numel());
  }

  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const StepArgs& b, const AttentionScoring& scoring) override {
    const int head_dim = int(k_cache.dim(3));
    const int num_q_heads = int(q.numel() / (int64_t(b.num_tokens) * head_dim));
    const PagedAttentionArgs args =
        paged_attention_args(b, num_q_heads, int(k_cache.dim(2)), head_dim, scoring);
    check_same(out, q, "paged_attention");
    // Work pieces of query rows, so one long prefill still uses every thread. Rows [r0, r1) of
    // a chunk of q_len are themselves a chunk whose kv_len is kv_len - (q_len - r1): each row
    // keeps its position, so causal and sliding-window alignment carry over, and each row is
    // computed exactly as in one call.
    struct Piece {
      int32_t cu[2], kv_len, seq;
    };
    const int32_t* cu = b.cu_q_lens.as<int32_t>();
    const int32_t* kv = b.kv_lens.as<int32_t>();
    const int max_rows = std::max(16, (b.num_tokens + pool_.size() - 1) / pool_.size());
    std::vector<Piece> pieces;
    for (int s = 0; s < b.num_seqs; ++s) {
      const int q_len = cu[s + 1] - cu[s];
      FS_CHECK(q_len >= 0 && kv[s] >= q_len, "sequence ", s, ": q_len ", q_len, " kv_len ", kv[s]);
      for (int r0 = 0; r0 < q_len; r0 += max_rows) {
        const int r1 = std::min(q_len, r0 + max_rows);
        pieces.push_back(Piece{{cu[s] + r0, cu[s] + r1}, kv[s] - (q_len - r1), s});
      }
    }
    const int chunks = std::min<int>(int(pieces.size()), pool_.size());
    pool_.run(chunks, [&](int c) {
      for (size_t i = size_t(c); i < pieces.size(); i += size_t(chunks)) {  // round robin
        PagedAttentionArgs a = args;
        a.num_seqs = 1;
        a.cu_q_lens = pieces[i].cu;
        a.kv_lens = &pieces[i].kv_len;
        a.block_table = b.block_table.as<int32_t>() + int64_t(pieces[i].seq) * b.max_blocks_per_seq;
        ref::paged_attention<float>(a, q.as<float>(), k_cache.as<float>(), v_cache.as<float>(),
                                    out.as<float>(), nullptr);
      }
    });
  }

 private:
  ThreadPool pool_;
  std::vector<float> kv_tmp_;  // qkv_rope_write_kv: this step's k and v, split out
  int64_t unpacked_weights_ = 0;  // packed weights dequantized since the last report
  double unpacked_s_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  FS_CHECK(threads >= 0, "threads must be >= 0, got ", threads);
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace flashserve
