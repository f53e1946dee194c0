// The CPU backend: plain fp32 loops over host memory. Weights are converted to f32 at load (FP8
// weights dequantized: the reference the CUDA kernels are checked against, docs/FP8.md).
// Matmul is split over output columns (weight rows) across a small thread pool, attention over
// ranges of query rows; each output element is computed by the same code whatever the split, so results
// do not depend on the thread count, the batch or the chunking. Attention is ref::paged_attention
// (ref::cascade_attention for a decode step that carries a cascade plan: off by default here).
#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "kernels/cpu/cascade_attention_ref.h"
#include "kernels/cpu/paged_attention_ref.h"
#include "parallel/reduction_order.h"

namespace flashserve {
namespace {

// Runs fn(chunk) for chunk in [0, num_chunks) on the caller plus size() - 1 workers.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return int(workers_.size()) + 1; }

  void run(int num_chunks, const std::function<void(int)>& fn) {
    num_chunks = std::min(num_chunks, size());
    if (num_chunks <= 1) {
      if (num_chunks == 1) fn(0);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      num_chunks_ = num_chunks;
      pending_ = int(workers_.size());
      error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
    std::exception_ptr mine;
    try {
      fn(0);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      int chunks;
      {
        std::unique_lock<std::mutex> lock(mu_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
        chunks = num_chunks_;
      }
      std::exception_ptr err;
      if (index < chunks) {
        try {
          (*job)(index);
        } catch (...) {
          err = std::current_exception();
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int num_chunks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

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

// out[i] = f(a[i], b[i]) over three f32 tensors of the same size (out may alias a or b).
template <class F>
void elementwise(Tensor out, const Tensor& a, const Tensor& b, const char* what, F f) {
  check_same(out, a, what);
  check_same(out, b, what);
  const float* ap = a.as<float>();
  const float* bp = b.as<float>();
  float* o = out.as<float>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = f(ap[i], bp[i]);
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

  Buffer load_weight(const TensorView& w) override {
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
    const int32_t* ids = token_ids.as<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      FS_CHECK(ids[i] >= 0 && ids[i] < vocab, "token id ", ids[i], " outside vocab ", vocab);
      std::memcpy(out.as<float>() + i * hidden, table.as<float>() + ids[i] * hidden, hidden * 4);
    }
  }

  void rms_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) override {
    const int64_t hidden = weight.numel(), n = x.numel() / hidden;
    check_same(out, x, "rms_norm");
    const float* w = weight.as<float>();
    for (int64_t r = 0; r < n; ++r) {
      const float* xr = x.as<float>() + r * hidden;
      float* o = out.as<float>() + r * hidden;
      double ss = 0.0;
      for (int64_t c = 0; c < hidden; ++c) ss += double(xr[c]) * xr[c];
      const float inv = float(1.0 / std::sqrt(ss / double(hidden) + double(eps)));
      for (int64_t c = 0; c < hidden; ++c) o[c] = xr[c] * inv * w[c];
    }
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
    std::vector<float> cs(half), sn(half);
    for (int64_t t = 0; t < n; ++t) {
      const double pos = positions.as<int32_t>()[t];
      for (int64_t i = 0; i < half; ++i) {  // angle in double: large positions keep precision
        const double a = pos * double(inv_freq.as<float>()[i]);
        cs[i] = float(std::cos(a));
        sn[i] = float(std::sin(a));
      }
      auto turn = [&](float* base, int64_t heads) {
        for (int64_t h = 0; h < heads; ++h) {
          float* v = base + (t * heads + h) * d;
          for (int64_t i = 0; i < half; ++i) {
            const float x1 = v[i], x2 = v[i + half];
            v[i] = x1 * cs[i] - x2 * sn[i];
            v[i + half] = x2 * cs[i] + x1 * sn[i];
          }
        }
      };
      turn(q.as<float>(), hq);
      turn(k.as<float>(), hk);
    }
  }

  void add_bias(Tensor x, const Tensor& bias) override {
    const int64_t width = bias.numel(), n = width ? x.numel() / width : 0;
    FS_CHECK(width > 0 && n * width == x.numel(), "add_bias: x has ", x.numel(),
             " elements, bias ", width);
    const float* b = bias.as<float>();
    for (int64_t r = 0; r < n; ++r) {
      float* xr = x.as<float>() + r * width;
      for (int64_t c = 0; c < width; ++c) xr[c] += b[c];
    }
  }

  void qk_norm(Tensor qkv, const Tensor& q_weight, const Tensor& k_weight, int num_q_heads,
               int num_kv_heads, float eps) override {
    FS_CHECK(qkv.ndim == 3 && qkv.dim(1) == num_q_heads + 2 * num_kv_heads &&
                 q_weight.numel() == qkv.dim(2) && k_weight.numel() == qkv.dim(2),
             "qk_norm: shapes");
    const int64_t heads = qkv.dim(1), d = qkv.dim(2);
    for (int64_t t = 0; t < qkv.dim(0); ++t)
      for (int64_t h = 0; h < num_q_heads + num_kv_heads; ++h) {
        float* v = qkv.as<float>() + (t * heads + h) * d;
        const float* w = (h < num_q_heads ? q_weight : k_weight).as<float>();
        double ss = 0.0;
        for (int64_t i = 0; i < d; ++i) ss += double(v[i]) * v[i];
        const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
        for (int64_t i = 0; i < d; ++i) v[i] = v[i] * inv * w[i];
      }
  }

  void swiglu(Tensor out, const Tensor& gate, const Tensor& up) override {
    elementwise(out, gate, up, "swiglu",
                [](float g, float u) { return g / (1.f + std::exp(-g)) * u; });
  }

  void add(Tensor out, const Tensor& a, const Tensor& b) override {
    elementwise(out, a, b, "add", [](float x, float y) { return x + y; });
  }

  void argmax_rows(Tensor ids, const Tensor& logits) override {
    FS_CHECK(logits.dtype == DType::kF32 && ids.dtype == DType::kI32 && logits.ndim == 2 &&
                 ids.numel() == logits.dim(0),
             "argmax_rows: shapes");
    const int64_t rows = logits.dim(0), cols = logits.dim(1);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits.as<float>() + r * cols;
      int32_t best = 0;
      bool nan = false;
      for (int64_t c = 0; c < cols; ++c) {
        nan |= std::isnan(row[c]);
        if (row[c] > row[best]) best = int32_t(c);  // ties keep the lowest id
      }
      ids.as<int32_t>()[r] = nan ? -1 : best;
    }
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
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t src = row_ids.as<int32_t>()[r];
      FS_CHECK(src >= 0 && src < x_rows, "gather_rows: row ", src, " of ", x_rows);
      std::memcpy(out.as<float>() + r * width, x.as<float>() + src * width, width * 4);
    }
  }

  void write_kv(Tensor k_cache, Tensor v_cache, const Tensor& k, const Tensor& v,
                const Tensor& slot_mapping) override {
    const int64_t n = slot_mapping.numel(), row = k.numel() / std::max<int64_t>(n, 1);
    const int64_t num_slots = k_cache.numel() / std::max<int64_t>(row, 1);
    check_same(k, v, "write_kv");
    for (int64_t t = 0; t < n; ++t) {
      const int32_t slot = slot_mapping.as<int32_t>()[t];
      FS_CHECK(slot >= 0 && slot < num_slots, "write_kv: slot ", slot, " of ", num_slots);
      std::memcpy(k_cache.as<float>() + slot * row, k.as<float>() + t * row, row * 4);
      std::memcpy(v_cache.as<float>() + slot * row, v.as<float>() + t * row, row * 4);
    }
  }

  void add_rms_norm(Tensor out, Tensor x, const Tensor& delta, const Tensor& weight,
                    float eps) override {
    add(x, x, delta);
    rms_norm(out, x, weight, eps);
  }

  void qkv_rope_write_kv(Tensor q, Tensor k_cache, Tensor v_cache, const Tensor& qkv,
                         const Tensor& positions, const Tensor& inv_freq,
                         const Tensor& slot_mapping) override {
    const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2), hkv = k_cache.dim(2);
    const int64_t width = (hq + 2 * hkv) * d;
    FS_CHECK(qkv.numel() == n * width && positions.numel() == n && slot_mapping.numel() == n,
             "qkv_rope_write_kv: qkv has ", qkv.numel(), " elements, want ", n * width);
    kv_tmp_.resize(size_t(2 * n * hkv * d));
    float* kp = kv_tmp_.data();
    float* vp = kp + n * hkv * d;
    const float* src = qkv.as<float>();
    for (int64_t t = 0; t < n; ++t) {
      const float* row = src + t * width;
      std::memcpy(q.as<float>() + t * hq * d, row, size_t(hq * d) * 4);
      std::memcpy(kp + t * hkv * d, row + hq * d, size_t(hkv * d) * 4);
      std::memcpy(vp + t * hkv * d, row + (hq + hkv) * d, size_t(hkv * d) * 4);
    }
    Tensor k(kp, DType::kF32, Device::kCpu, {n, hkv, d});
    Tensor v(vp, DType::kF32, Device::kCpu, {n, hkv, d});
    rope(q, k, positions, inv_freq);
    write_kv(k_cache, v_cache, k, v, slot_mapping);
  }

  void swiglu_fused(Tensor out, const Tensor& gate_up) override {
    const int64_t inter = out.dim(out.ndim - 1), n = out.numel() / std::max<int64_t>(inter, 1);
    FS_CHECK(gate_up.numel() == 2 * n * inter, "swiglu_fused: gate_up has ", gate_up.numel(),
             " elements, want ", 2 * n * inter);
    const float* gu = gate_up.as<float>();
    float* o = out.as<float>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < inter; ++i) {
        const float g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
        o[r * inter + i] = g / (1.f + std::exp(-g)) * u;
      }
  }

  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const StepArgs& b, float scale) override {
    const int head_dim = int(k_cache.dim(3));
    const int num_q_heads = int(q.numel() / (int64_t(b.num_tokens) * head_dim));
    const PagedAttentionArgs args =
        paged_attention_args(b, num_q_heads, int(k_cache.dim(2)), head_dim, scale);
    check_same(out, q, "paged_attention");
    if (b.cascade.active()) {  // the twin of the CUDA cascade path, for tests (one thread)
      ref::cascade_attention<float>(cascade_attention_args(b, num_q_heads, args.num_kv_heads,
                                                           head_dim, scale),
                                    q.as<float>(), k_cache.as<float>(), v_cache.as<float>(),
                                    out.as<float>());
      return;
    }
    // Work pieces of query rows, so one long prefill still uses every thread. Rows [r0, r1) of
    // a chunk of q_len are themselves a chunk whose kv_len is kv_len - (q_len - r1): causal
    // alignment carries over, and each row is computed exactly as in one call.
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
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  FS_CHECK(threads >= 0, "threads must be >= 0, got ", threads);
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace flashserve
