// Helpers for the prefill attention GPU tests: a randomly filled paged KV cache with a shuffled
// block table and NaN in every slot no sequence owns, device buffers, the naive 16-bit
// attention used to calibrate tolerances, and the tolerance policy (one place, with reasons).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/paged_attention.h"

namespace flashserve::test {

// ---- tolerances ----------------------------------------------------------------------------
// O: the kernel must satisfy max_abs_err <= kErrFactor * naive_err + floor, where naive_err is
// the max abs error (vs the fp64 reference) of a naive implementation that computes the logits
// and softmax in fp32, rounds P to the 16-bit type before P.V (as the kernel's MMA does) and
// rounds O to the 16-bit type. Factor 2 is flash-attn's convention: the kernel only reorders
// fp32 sums (online rescaling), so it should stay within a small multiple of the error the
// format forces. floor = 1 unit of the format at the largest |O_ref| (2^-8 bf16, 2^-11 fp16)
// keeps the bound meaningful when the naive path is exact by luck (e.g. single-key rows).
constexpr double kErrFactor = 2.0;
constexpr double kFloorUlps = 1.0;
// LSE (fp32, base 2): logits come from fp32-accumulated MMAs of the same 16-bit inputs the
// reference uses, so errors are fp32 rounding of sums of up to ~d products plus ex2.approx /
// log2 approximations (~2^-22 relative): 1e-3 absolute plus 1e-5 relative is ample and still
// catches a wrong max, a wrong scale (factor ln 2) or a missing key (>= 1e-3 unless its weight
// is negligible).
constexpr double kLseAbsTol = 1e-3;
constexpr double kLseRelTol = 1e-5;

inline double unit_roundoff(DType t) { return t == DType::kF16 ? 1.0 / 2048 : 1.0 / 256; }

// Which implementation a case runs: the public launcher (its own choice of kernel and tile; it is
// offered the fresh K/V rows, which it reads on Hopper), the mma.sync
// kernel, the Hopper kernel, or the Hopper kernel's contiguous variants given the fresh K/V rows
// (kernels/attention_prefill.h: FreshKv; fp16 runs its variant 0, the only one compiled).
enum class PrefillKernel { kLauncher, kFa2, kSm90, kSm90Contig };
const char* kernel_name(PrefillKernel k);

struct SeqSpec {
  int q_len;
  int kv_len;
};

struct PrefillCase {
  std::string name;
  std::vector<SeqSpec> seqs;
  int num_q_heads = 8;
  int num_kv_heads = 8;
  int head_dim = 128;
  int block_size = 16;
  bool causal = true;
  DType dtype = DType::kBF16;
  float q_scale = 1.f;  // > 1 gives large logits (peaked softmax)
  PrefillKernel kernel = PrefillKernel::kLauncher;
  int variant = -1;  // kFa2 / kSm90: -1 is that kernel's default choice, >= 0 that variant
  int window = 0;       // sliding window (0 = every key)
  float softcap = 0.f;  // soft-capping (0 = off)
  float scale = 0.f;    // softmax scale (0 = 1 / sqrt(head_dim))
  std::vector<float> sinks;  // [num_q_heads] sink logits (empty = none)
};

// Host copy of one randomly filled problem, values already rounded to the 16-bit type.
struct PrefillProblem {
  PagedAttentionArgs args;  // host pointers into the vectors below
  int num_tokens = 0;
  std::vector<float> sinks;  // the case's sinks (args.sinks points here, or is null)
  int num_blocks = 0;
  std::vector<int32_t> cu_q_lens, kv_lens, block_table;
  std::vector<uint16_t> q_bits, k_bits, v_bits;  // NaN in every cache slot no sequence owns
  std::vector<double> q, k, v;                   // same values (0 in unowned slots)
  // This step's own K/V rows as the CUDA backend hands them over (FreshKv): K in a buffer of its
  // own [num_tokens, num_kv_heads * head_dim], V inside a fused qkv projection
  // [num_tokens, fresh_qkv_stride] at column (num_q_heads + num_kv_heads) * head_dim. Only
  // sequences with q_len == kv_len (no cached prefix) have their rows filled (the cache's values);
  // every other element is NaN, so a kernel that reads them for a chunked sequence fails.
  std::vector<uint16_t> fresh_k_bits, fresh_qkv_bits;
  int64_t fresh_qkv_stride = 0;
};

PrefillProblem make_problem(const PrefillCase& c, uint64_t seed);

// Naive attention with fp32 logits/softmax, P and O rounded to `dtype` (see kErrFactor); the
// same window, soft-capping and sinks as the problem's args.
void naive_attention_16bit(const PrefillProblem& pb, DType dtype, std::vector<double>& out);

struct CheckResult {
  bool ok = true;
  std::string message;  // first failures and the error summary
};

// Runs c.kernel / c.variant on the GPU and compares with the fp64 reference and the naive bound.
// When `out_bits` is given, the raw output is stored there (determinism checks).
CheckResult run_and_check(const PrefillCase& c, uint64_t seed,
                          std::vector<uint16_t>* out_bits = nullptr);

}  // namespace flashserve::test
