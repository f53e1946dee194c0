// The GPU sampler: one thread block per sampled row runs the host sampler's algorithm
// (sampling/sampler.cpp) step for step: the grammar mask, logit_bias and penalties, greedy argmax or temperature,
// top-k, top-p, min-p, one Philox draw by inverse CDF in id order. Two choices make it fit a GPU
// and stay reproducible:
//  - no sort: the top-k and top-p boundaries are found by radix selection over order-preserving
//    32-bit keys of the logits (4 passes of 8 bits, a 256-bin histogram in shared memory each);
//    equal logits are ordered by id, as the host's comparator orders them;
//  - probabilities (1 for the best token) are summed as fixed-point integers
//    (SampleRowArgs::mass_scale), so every sum is exact and the answer never depends on the order
//    in which threads add. The host sums doubles; the two differ by about vocab * 2^-(62 -
//    log2(vocab)) of the top token's mass, so they can disagree only when the uniform draw
//    falls within that distance of a boundary.
// Probabilities are recomputed (double exp, as the host) in each pass instead of stored, so the
// only scratch is a penalised copy of the row and one byte per token ("still a candidate").
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <climits>
#include <cstdint>

#include "core/philox.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/sample_rows.h"

namespace flashserve::cuda {
namespace {

constexpr int kThreads = 512;  // 1024 would cap registers at 64 and spill
constexpr int kWarps = kThreads / 32;
using u64 = unsigned long long;

// Larger float -> larger key (the usual sign flip); -0 counts as +0, as the host compares them
// equal. NaN never gets here.
__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t b = x == 0.f ? 0u : __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

struct ArgMax {
  float v;
  int32_t i;
};
struct BetterOf {  // larger value; equal values: lower id (the host's strict > over ids)
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const {
    return (a.v > b.v || (a.v == b.v && a.i < b.i)) ? a : b;
  }
};
struct MinOf {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct MaxOf {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

struct Shared {
  union {
    cub::BlockReduce<ArgMax, kThreads>::TempStorage argmax;
    cub::BlockReduce<u64, kThreads>::TempStorage sum;
    cub::BlockReduce<int, kThreads>::TempStorage index;
    cub::BlockScan<u64, kThreads>::TempStorage scan;
  } cub;
  u64 hist[256];
  u64 warp_hist[kWarps][256];  // histogram(): masses, one copy per warp
  uint32_t counts[256];        // histogram(): counts
  ArgMax best;
  u64 value;
  uint32_t digit;
  int32_t count;
};

// One sampled row. Thread t also owns the contiguous id range [lo, hi), used where the id order
// matters (tie ranks, the inverse CDF); the other passes stride for coalescing.
class RowSampler {
 public:
  __device__ RowSampler(Shared& sh, const SampleRowArgs& a, float* w, uint8_t* alive, int vocab)
      : sh_(sh), a_(a), w_(w), alive_(alive), vocab_(vocab) {
    const int per = (vocab + kThreads - 1) / kThreads;
    lo_ = min(vocab, int(threadIdx.x) * per);
    hi_ = min(vocab, lo_ + per);
  }

  __device__ double prob(float v) const { return exp((double(v) - max_) * a_.inv_temperature); }
  __device__ u64 mass(float v) const { return u64(prob(v) * a_.mass_scale); }

  // logit_bias and penalties on the copy w (as apply_penalties(), one thread per token).
  __device__ void apply_edits(const TokenEdit* edits, const float* biases) {
    for (int e = a_.edits_begin + int(threadIdx.x); e < a_.edits_end; e += kThreads) {
      const TokenEdit t = edits[e];
      float v = w_[t.token];
      for (int j = t.bias_begin; j < t.bias_end; ++j) v = __fadd_rn(v, biases[j]);
      if (a_.repetition_penalty != 1.f && t.seen)
        v = v > 0.f ? __fdiv_rn(v, a_.repetition_penalty) : __fmul_rn(v, a_.repetition_penalty);
      if ((a_.presence_penalty != 0.f || a_.frequency_penalty != 0.f) && t.count > 0)
        v = __fsub_rn(v, __fadd_rn(__fmul_rn(a_.frequency_penalty, float(t.count)),
                                   a_.presence_penalty));
      w_[t.token] = v;
    }
    __syncthreads();
  }

  __device__ ArgMax argmax() {
    ArgMax best{-INFINITY, INT_MAX};
    for (int i = threadIdx.x; i < vocab_; i += kThreads) best = BetterOf()(best, ArgMax{w_[i], i});
    best = cub::BlockReduce<ArgMax, kThreads>(sh_.cub.argmax).Reduce(best, BetterOf());
    if (threadIdx.x == 0) sh_.best = best;
    __syncthreads();
    best = sh_.best;
    max_ = double(best.v);
    __syncthreads();
    return best;
  }

  // Candidates are the tokens whose probability is not 0; returns their number.
  __device__ int mark_candidates() {
    u64 n = 0;
    for (int i = threadIdx.x; i < vocab_; i += kThreads) {
      const bool on = prob(w_[i]) > 0.0;
      alive_[i] = on;
      n += on;
    }
    return int(block_sum(n));
  }

  // Keeps the top_k best (ties: lowest ids), as nth_element with the host's comparator.
  __device__ void top_k(int k) {
    u64 above = 0;
    const uint32_t key = radix_descend(/*by_mass=*/false, double(k), &above);
    keep_from(key, k - int(above));  // the k-th best is among the ties at key
  }

  // Keeps the smallest best-first prefix whose mass reaches top_p of the candidates' mass.
  __device__ void top_p(float p) {
    u64 local = 0;
    for (int i = threadIdx.x; i < vocab_; i += kThreads)
      if (alive_[i]) local += mass(w_[i]);
    const double target = double(p) * double(block_sum(local));
    u64 above = 0;
    const uint32_t prefix = radix_descend(/*by_mass=*/true, target, &above);
    // Every token with key == prefix has the same mass q: keep the fewest (lowest ids) that
    // bring the running mass to the target, at least one.
    if (threadIdx.x == 0) {
      const u64 q = mass(key_value(prefix));
      int64_t c = 1;
      if (q > 0) {
        const double need = target - double(above);
        c = need > 0 ? int64_t(ceil(need / double(q))) : 1;
        c = c < 1 ? 1 : (c > vocab_ ? vocab_ : c);
        while (c > 1 && double(above + u64(c - 1) * q) >= target) --c;
        while (c < vocab_ && double(above + u64(c) * q) < target) ++c;
      }
      sh_.count = int32_t(c);
    }
    __syncthreads();
    const int keep = sh_.count;
    __syncthreads();
    keep_from(prefix, keep);
  }

  __device__ void min_p(float p) {
    for (int i = threadIdx.x; i < vocab_; i += kThreads)
      if (alive_[i] && prob(w_[i]) < double(p)) alive_[i] = 0;
    __syncthreads();
  }

  // One inverse-CDF draw over the candidates in id order.
  __device__ int draw() {
    u64 local = 0;
    for (int i = lo_; i < hi_; ++i)
      if (alive_[i]) local += mass(w_[i]);
    u64 before = 0, total = 0;
    cub::BlockScan<u64, kThreads>(sh_.cub.scan).ExclusiveSum(local, before, total);
    __syncthreads();
    const Philox4x32 r = philox_draw(a_.seed, a_.step);
    const double target = philox_uniform53(r.v[0], r.v[1]) * double(total);
    int found = INT_MAX, last = -1;
    u64 cum = before;
    for (int i = lo_; i < hi_; ++i) {
      if (!alive_[i]) continue;
      last = i;
      cum += mass(w_[i]);
      if (target < double(cum)) {
        found = i;
        break;
      }
    }
    found = cub::BlockReduce<int, kThreads>(sh_.cub.index).Reduce(found, MinOf());
    __syncthreads();
    last = cub::BlockReduce<int, kThreads>(sh_.cub.index).Reduce(last, MaxOf());
    // (the host's fallback when rounding left the target at the very end: its last candidate)
    return found != INT_MAX ? found : last;  // valid in thread 0
  }

 private:
  __device__ u64 block_sum(u64 x) {
    x = cub::BlockReduce<u64, kThreads>(sh_.cub.sum).Sum(x);
    if (threadIdx.x == 0) sh_.value = x;
    __syncthreads();
    x = sh_.value;
    __syncthreads();
    return x;
  }

  // sh_.hist[d] = count (or mass) of the candidates whose key matches prefix under mask and
  // whose 8 bits at shift are d. Most keys share their high bits, so a few bins take most adds:
  // counts go to one histogram of native 32-bit shared atomics; masses (64-bit, whose shared
  // atomics are slower) to one copy per warp, summed exactly at the end. (Measured on H100 at
  // vocab 32000: a warp-aggregated single histogram was 2-3x slower than either.)
  __device__ void histogram(uint32_t prefix, uint32_t mask, int shift, bool by_mass) {
    u64* mine = sh_.warp_hist[threadIdx.x / 32];
    for (int j = threadIdx.x; j < kWarps * 256; j += kThreads) (&sh_.warp_hist[0][0])[j] = 0;
    for (int j = threadIdx.x; j < 256; j += kThreads) sh_.counts[j] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab_; i += kThreads) {
      if (!alive_[i]) continue;
      const uint32_t k = order_key(w_[i]);
      if ((k & mask) != prefix) continue;
      const uint32_t bin = (k >> shift) & 0xFFu;
      if (by_mass)
        atomicAdd(&mine[bin], mass(w_[i]));
      else
        atomicAdd(&sh_.counts[bin], 1u);
    }
    __syncthreads();
    for (int j = threadIdx.x; j < 256; j += kThreads) {
      u64 sum = by_mass ? 0 : sh_.counts[j];
      if (by_mass)
        for (int w = 0; w < kWarps; ++w) sum += sh_.warp_hist[w][j];
      sh_.hist[j] = sum;
    }
    __syncthreads();
  }

  // Best first, the running count (or mass) of the candidates reaches `need` at an element
  // with key K: found 8 bits at a time from the top. Returns K; *above = the count (or mass) of
  // the candidates with a key above K.
  __device__ uint32_t radix_descend(bool by_mass, double need, u64* above_out) {
    uint32_t prefix = 0, mask = 0;
    u64 above = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      histogram(prefix, mask, shift, by_mass);
      if (threadIdx.x == 0) {
        int d = 255;
        for (; d > 0 && double(above + sh_.hist[d]) < need; --d) above += sh_.hist[d];
        sh_.digit = uint32_t(d);
        sh_.value = above;
      }
      __syncthreads();
      prefix |= sh_.digit << shift;
      mask |= 0xFFu << shift;
      above = sh_.value;
    }
    *above_out = above;
    return prefix;
  }

  // Drops the candidates below key, and of those equal to key all but the `keep` lowest ids.
  __device__ void keep_from(uint32_t key, int keep) {
    u64 ties = 0;
    for (int i = lo_; i < hi_; ++i) ties += alive_[i] && order_key(w_[i]) == key;
    u64 rank = 0;
    cub::BlockScan<u64, kThreads>(sh_.cub.scan).ExclusiveSum(ties, rank);
    for (int i = lo_; i < hi_; ++i) {
      if (!alive_[i]) continue;
      const uint32_t k = order_key(w_[i]);
      if (k < key || (k == key && rank++ >= u64(keep))) alive_[i] = 0;
    }
    __syncthreads();
  }

  Shared& sh_;
  const SampleRowArgs& a_;
  float* w_;
  uint8_t* alive_;
  int vocab_, lo_ = 0, hi_ = 0;
  double max_ = 0.0;
};

__global__ void __launch_bounds__(kThreads)
    sample_kernel(int32_t* ids, float* work, uint8_t* alive, const float* logits,
                  const SampleRowArgs* args, const TokenEdit* edits, const float* biases,
                  const uint32_t* masks, int vocab) {
  __shared__ Shared sh;
  __shared__ SampleRowArgs a;
  if (threadIdx.x == 0) a = args[blockIdx.x];
  __syncthreads();
  const float* src = logits + a.logits_row * int64_t(vocab);
  float* w = work + int64_t(blockIdx.x) * vocab;
  const uint32_t* allowed = a.mask_offset >= 0 ? masks + a.mask_offset : nullptr;
  int nan = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = src[i];
    nan |= v != v;  // of the raw row, masked tokens included (as the host checks)
    w[i] = allowed && !((allowed[i / 32] >> (i % 32)) & 1u) ? -INFINITY : v;
  }
  if (__syncthreads_or(nan)) {  // as argmax_rows: the caller fails the request
    if (threadIdx.x == 0) ids[blockIdx.x] = -1;
    return;
  }
  RowSampler s(sh, a, w, alive + int64_t(blockIdx.x) * vocab, vocab);
  s.apply_edits(edits, biases);
  const ArgMax best = s.argmax();
  if (a.temperature == 0.f || !isfinite(best.v)) {  // greedy, or nothing finite to weigh
    if (threadIdx.x == 0) ids[blockIdx.x] = best.i;
    return;
  }
  const int candidates = s.mark_candidates();
  if (a.top_k > 0 && a.top_k < candidates) s.top_k(a.top_k);
  if (a.top_p < 1.f) s.top_p(a.top_p);
  if (a.min_p > 0.f) s.min_p(a.min_p);
  const int id = s.draw();
  if (threadIdx.x == 0) ids[blockIdx.x] = id;
}

}  // namespace

void sample_rows_f32(int32_t* ids, float* work, uint8_t* alive, const float* logits,
                     const SampleRowArgs* args, const TokenEdit* edits, const float* biases,
                     const uint32_t* masks, int n, int vocab, cudaStream_t stream) {
  if (n == 0) return;
  FS_CHECK(vocab > 0, "sample_rows: empty vocabulary");
  sample_kernel<<<n, kThreads, 0, stream>>>(ids, work, alive, logits, args, edits, biases, masks,
                                            vocab);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda
