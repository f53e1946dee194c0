// The MoE grouped GEMM (kernels/moe_grouped_gemm.h) against its CPU twin
// (kernels/cpu/moe_grouped_gemm_ref.h), each tile configuration this GPU runs forced (on Hopper
// both wgmma tiles and the mma.sync kernel) and the launcher's own choice: ragged row counts around the 64- and 128-row tiles, experts with no rows, one expert
// with every row, a single expert, k and n not multiples of the 64-column k-block or the 256-column
// tile (down to 8), long k (the stage ring wraps hundreds of times), Qwen3-30B-A3B's expert shape
// under random top-8 routing; outputs poisoned with NaN first, the rows past offsets[E] (where a
// holds NaN that partial tiles read) left untouched. Also: repeated runs bitwise equal, a CUDA graph
// replayed after the offsets changed on the device (nothing read on the host), offsets that are
// garbage (no access out of bounds), and the argument checks.
// Tolerance, per output, B = sum |a| |w|: the products of bf16 inputs are exact in fp32; the fp32
// sum is off by at most an ulp or two per addition (2 k 2^-23 B, allowing the tensor cores'
// truncating adds); the bf16 output rounds once more (2^-8 of the value). The relative Frobenius
// error over the whole output must also stay below 4e-3 (bf16 rounding alone gives about 1e-3),
// which catches a lost k-slice that the per-element bound, loose for long k, might let through.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cpu/moe_grouped_gemm_ref.h"
#include "kernels/moe_grouped_gemm.h"
#include "tests/kernels/device_test_util.h"

namespace flashserve {
namespace {

using cuda::MoeGemmTile;
using test::Dev;

constexpr uint16_t kNanBits = 0xffff;  // what Dev::poison writes: a bf16 NaN
constexpr double kFrobeniusTol = 4e-3;

int compute_capability_major() {
  int dev = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major;
}

// Whether the Hopper kernel runs here (a compute capability 9.0 GPU and an sm_90a build): the
// launcher then picks one of its tiles.
bool hopper_kernel() { return cuda::moe_grouped_gemm_auto_tile(8, 4096) != MoeGemmTile::k128x128Mma; }

// The tiles this device runs, each forced, and the launcher's choice.
std::vector<MoeGemmTile> tiles_here() {
  if (hopper_kernel())
    return {MoeGemmTile::k128x256, MoeGemmTile::k64x256, MoeGemmTile::k128x128Mma, MoeGemmTile::kAuto};
  return {MoeGemmTile::k128x128Mma, MoeGemmTile::kAuto};
}

// One problem: per-expert row counts, the stacked weights and the rows, on the host (floats that
// are exactly bf16) and on the device. Rows [total, max_rows) of a are NaN: the last expert's
// partial tile reads them, and they must not reach any stored output.
struct Problem {
  int num_experts, n, k, max_rows, total;
  std::vector<int32_t> offsets;
  std::vector<float> a, w;
  std::vector<float> want, bound;  // the twin's output and sum |a| |w| per output, rows [0, total)

  Problem(std::vector<int> rows, int n_, int k_, int extra_rows, std::mt19937& rng)
      : num_experts(int(rows.size())), n(n_), k(k_) {
    offsets.assign(size_t(num_experts) + 1, 0);
    for (int e = 0; e < num_experts; ++e) offsets[size_t(e) + 1] = offsets[size_t(e)] + rows[size_t(e)];
    total = offsets.back();
    max_rows = total + extra_rows;
    a = test::random_bf16(size_t(max_rows) * k, rng, -0.5f, 1.5f);  // not centred on zero
    for (size_t i = size_t(total) * k; i < a.size(); ++i) a[i] = std::nanf("");
    w = test::random_bf16(size_t(num_experts) * n * k, rng, -1.f, 1.f);
    want.assign(size_t(total) * n, 0.f);
    bound.assign(size_t(total) * n, 0.f);
    if (total == 0) return;
    ref::moe_grouped_gemm(want.data(), a.data(), offsets.data(), w.data(), num_experts, n, k);
    std::vector<float> abs_a(a.begin(), a.begin() + int64_t(total) * k), abs_w(w);
    for (float& x : abs_a) x = std::fabs(x);
    for (float& x : abs_w) x = std::fabs(x);
    ref::moe_grouped_gemm(bound.data(), abs_a.data(), offsets.data(), abs_w.data(), num_experts, n, k);
  }
};

struct DevProblem {
  Dev<uint16_t> a, w;
  Dev<int32_t> offsets;
  explicit DevProblem(const Problem& p) : a(test::to_bf16(p.a)), w(test::to_bf16(p.w)), offsets(p.offsets) {}
};

// Runs the kernel (tile forced, or the public entry point for kAuto) into an output poisoned with
// NaN, with one guard row past max_rows; returns the raw bf16 bits.
std::vector<uint16_t> run(const Problem& p, const DevProblem& d, MoeGemmTile tile) {
  Dev<uint16_t> out((size_t(p.max_rows) + 1) * p.n);
  out.poison();
  if (tile == MoeGemmTile::kAuto) {
    const size_t ws = cuda::moe_grouped_gemm_workspace(p.num_experts, p.n, p.k, p.max_rows);
    Dev<uint8_t> workspace(ws);
    cuda::moe_grouped_gemm(out.ptr, d.a.ptr, d.offsets.ptr, d.w.ptr, p.num_experts, p.n, p.k, p.max_rows,
                           workspace.ptr, ws, nullptr);
  } else {
    cuda::moe_grouped_gemm_tile(tile, out.ptr, d.a.ptr, d.offsets.ptr, d.w.ptr, p.num_experts, p.n, p.k,
                                p.max_rows, nullptr);
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  return out.get();
}

void check_output(const Problem& p, const std::vector<uint16_t>& got_bits, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<float> got = test::from_bf16(got_bits);
  double err2 = 0, ref2 = 0;
  const double add_ulps = 2.0 * double(p.k) * std::ldexp(1.0, -23);
  for (size_t i = 0; i < p.want.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "row " << i / size_t(p.n) << " column " << i % size_t(p.n)
                                       << " not written (or NaN leaked in)";
    const double want = p.want[i], diff = std::fabs(double(got[i]) - want);
    const double tol = std::ldexp(1.0, -8) * std::fabs(want) + add_ulps * p.bound[i] * (1 + std::ldexp(1.0, -8));
    ASSERT_LE(diff, tol) << "row " << i / size_t(p.n) << " column " << i % size_t(p.n) << ": got " << got[i]
                         << " want " << want;
    err2 += diff * diff;
    ref2 += want * want;
  }
  if (ref2 > 0) {
    EXPECT_LE(std::sqrt(err2 / ref2), kFrobeniusTol);
  }
  // Rows [total, max_rows] (the guard row included) belong to no expert: never written.
  for (size_t i = p.want.size(); i < got_bits.size(); ++i)
    ASSERT_EQ(got_bits[i], kNanBits) << "wrote row " << i / size_t(p.n) << ", outside every expert's range";
}

// Every tile configuration and the launcher's choice on one problem.
void check_all_tiles(const Problem& p, const std::string& name) {
  const DevProblem d(p);
  for (MoeGemmTile tile : tiles_here()) {
    const std::string what = name + " tile " + cuda::moe_gemm_tile_name(tile) + " (E " +
                             std::to_string(p.num_experts) + ", n " + std::to_string(p.n) + ", k " +
                             std::to_string(p.k) + ", rows " + std::to_string(p.total) + "/" +
                             std::to_string(p.max_rows) + ")";
    check_output(p, run(p, d, tile), what);
  }
}

class MoeGroupedGemm : public testing::Test {
 protected:
  void SetUp() override {
    if (compute_capability_major() < 8) {
      Dev<uint16_t> buf(64 * 64);
      Dev<int32_t> offsets(std::vector<int32_t>{0, 8});
      EXPECT_THROW(cuda::moe_grouped_gemm(buf.ptr, buf.ptr, offsets.ptr, buf.ptr, 1, 64, 64, 8, nullptr, 0, nullptr),
                   Error);
      GTEST_SKIP() << "the grouped GEMM needs compute capability 8.0+ (it throws here, checked)";
    }
  }
  std::mt19937 rng{4343};
};

TEST_F(MoeGroupedGemm, TileChoice) {
  if (hopper_kernel()) {
    // Few rows per expert: the 64-row tile; many: the 128-row one.
    EXPECT_EQ(cuda::moe_grouped_gemm_auto_tile(128, 128 * 32), MoeGemmTile::k64x256);
    EXPECT_EQ(cuda::moe_grouped_gemm_auto_tile(128, 128 * 512), MoeGemmTile::k128x256);
    EXPECT_EQ(cuda::moe_grouped_gemm_auto_tile(8, 8 * 2048), MoeGemmTile::k128x256);
  } else {
    // Elsewhere the mma.sync kernel, and forcing a Hopper tile is an error.
    EXPECT_EQ(cuda::moe_grouped_gemm_auto_tile(128, 128 * 512), MoeGemmTile::k128x128Mma);
    Dev<uint16_t> buf(64 * 64);
    Dev<int32_t> offsets(std::vector<int32_t>{0, 8});
    EXPECT_THROW(cuda::moe_grouped_gemm_tile(MoeGemmTile::k128x256, buf.ptr, buf.ptr, offsets.ptr, buf.ptr, 1, 64,
                                             64, 8, nullptr),
                 Error);
  }
}

TEST_F(MoeGroupedGemm, RaggedRowCounts) {
  std::vector<int> rows(8);
  std::uniform_int_distribution<int> u(1, 300);
  for (int& r : rows) r = u(rng);
  rows[2] = 0;
  rows[7] = 0;
  check_all_tiles(Problem(rows, 512, 256, 37, rng), "ragged");
}

TEST_F(MoeGroupedGemm, RowCountsAroundTheTiles) {
  check_all_tiles(Problem({1, 63, 64, 65, 127, 128, 129, 255, 257}, 256, 128, 1, rng), "tile edges");
}

TEST_F(MoeGroupedGemm, ExpertsWithNoRows) {
  std::vector<int> rows(32, 0);
  rows[0] = 70, rows[17] = 200, rows[31] = 5;
  check_all_tiles(Problem(rows, 264, 200, 0, rng), "mostly empty experts");
  std::vector<int> first_and_last(16, 0);
  first_and_last[0] = 1, first_and_last[15] = 1;
  check_all_tiles(Problem(first_and_last, 64, 64, 300, rng), "first and last expert, one row each");
}

TEST_F(MoeGroupedGemm, NoRowsAtAll) {
  // Every expert empty: nothing may be written, even with max_rows > 0.
  check_all_tiles(Problem(std::vector<int>(8, 0), 128, 64, 100, rng), "all experts empty");
}

TEST_F(MoeGroupedGemm, OneExpertTakesEveryRow) {
  std::vector<int> rows(8, 0);
  rows[5] = 1000;
  check_all_tiles(Problem(rows, 512, 192, 3, rng), "one expert, all rows");
}

TEST_F(MoeGroupedGemm, SingleExpert) {
  check_all_tiles(Problem({777}, 768, 512, 0, rng), "E = 1");
  check_all_tiles(Problem({1}, 8, 8, 0, rng), "E = 1, one row, n = k = 8");
}

TEST_F(MoeGroupedGemm, KNotAMultipleOfTheKBlock) {
  for (int k : {8, 16, 56, 64, 72, 136, 1408}) check_all_tiles(Problem({33, 0, 150}, 136, k, 5, rng), "k edge");
}

TEST_F(MoeGroupedGemm, NNotAMultipleOfTheTile) {
  for (int n : {8, 24, 248, 256, 264, 520}) check_all_tiles(Problem({10, 129, 0, 64}, n, 96, 2, rng), "n edge");
}

TEST_F(MoeGroupedGemm, LongK) {
  // Mixtral's down projection k: 224 k-blocks per tile.
  check_all_tiles(Problem({40, 0, 100, 7, 64, 1, 0, 130}, 256, 14336, 0, rng), "long k");
}

TEST_F(MoeGroupedGemm, Qwen3ExpertShapeRandomTop8) {
  // 48 tokens routed to 8 distinct experts of 128 each: Qwen3-30B-A3B's gate_up (n 1536, k 2048).
  constexpr int kExperts = 128, kTokens = 48, kTopK = 8;
  std::vector<int> rows(kExperts, 0), ids(kExperts);
  for (int t = 0; t < kTokens; ++t) {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int j = 0; j < kTopK; ++j) ++rows[size_t(ids[size_t(j)])];
  }
  check_all_tiles(Problem(rows, 1536, 2048, 0, rng), "qwen3 gate_up");
}

TEST_F(MoeGroupedGemm, RepeatedRunsAreBitwiseEqual) {
  const Problem p({300, 0, 17, 129, 64}, 512, 320, 0, rng);
  const DevProblem d(p);
  for (MoeGemmTile tile : tiles_here()) {
    const std::vector<uint16_t> first = run(p, d, tile);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(run(p, d, tile), first) << cuda::moe_gemm_tile_name(tile);
  }
}

TEST_F(MoeGroupedGemm, GraphReplaysAfterTheOffsetsChangeOnTheDevice) {
  // One graph captured with routing A, replayed after the offsets buffer was overwritten with
  // routing B: the output follows B, so nothing about the offsets was fixed at capture on the host.
  const std::vector<int> rows_a{100, 0, 28, 300}, rows_b{0, 250, 170, 8};
  const int n = 384, k = 256;
  const Problem pa(rows_a, n, k, 0, rng);
  Problem pb(rows_b, n, k, 0, rng);
  ASSERT_EQ(pa.max_rows, pb.max_rows);
  // Routing B over A's rows and weights, so that only the offsets differ between the replays.
  pb.a = pa.a;
  pb.w = pa.w;
  ref::moe_grouped_gemm(pb.want.data(), pb.a.data(), pb.offsets.data(), pb.w.data(), 4, n, k);
  {
    std::vector<float> abs_a(pb.a), abs_w(pb.w);
    for (float& x : abs_a) x = std::fabs(x);
    for (float& x : abs_w) x = std::fabs(x);
    ref::moe_grouped_gemm(pb.bound.data(), abs_a.data(), pb.offsets.data(), abs_w.data(), 4, n, k);
  }
  const DevProblem d(pa);
  Dev<uint16_t> out((size_t(pa.max_rows) + 1) * n);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  // An eager call first, as the backend's first step runs before any capture.
  cuda::moe_grouped_gemm(out.ptr, d.a.ptr, d.offsets.ptr, d.w.ptr, 4, n, k, pa.max_rows, nullptr, 0, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cuda::moe_grouped_gemm(out.ptr, d.a.ptr, d.offsets.ptr, d.w.ptr, 4, n, k, pa.max_rows, nullptr, 0, stream);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (const Problem* p : {&pa, static_cast<const Problem*>(&pb), &pa}) {
    out.poison();
    CUDA_CHECK(cudaDeviceSynchronize());  // the memset runs on the legacy stream
    CUDA_CHECK(cudaMemcpyAsync(d.offsets.ptr, p->offsets.data(), p->offsets.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    check_output(*p, out.get(), p == &pb ? "graph replay, routing B" : "graph replay, routing A");
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_F(MoeGroupedGemm, GarbageOffsetsStayInBounds) {
  // Offsets that decrease, go negative and run past max_rows: the kernel clamps them, so it
  // finishes without a fault and writes nothing past max_rows (the guard rows stay NaN).
  const int n = 256, k = 64, max_rows = 64, guard = 64;
  const std::vector<int32_t> garbage{5, 3, -7, 1000000, 2, 64, 64, 70, INT32_MIN, INT32_MAX};
  const int num_experts = int(garbage.size()) - 1;
  Dev<uint16_t> a(test::to_bf16(test::random_bf16(size_t(max_rows) * k, rng)));
  Dev<uint16_t> w(test::to_bf16(test::random_bf16(size_t(num_experts) * n * k, rng)));
  Dev<int32_t> offsets(garbage);
  for (MoeGemmTile tile : tiles_here()) {
    Dev<uint16_t> out(size_t(max_rows + guard) * n);
    out.poison();
    cuda::moe_grouped_gemm_tile(tile, out.ptr, a.ptr, offsets.ptr, w.ptr, num_experts, n, k, max_rows, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cuda::moe_gemm_tile_name(tile);
    const std::vector<uint16_t> got = out.get();
    for (size_t i = size_t(max_rows) * n; i < got.size(); ++i)
      ASSERT_EQ(got[i], kNanBits) << "wrote guard row " << i / size_t(n) << " (" << cuda::moe_gemm_tile_name(tile)
                                  << ")";
  }
}

TEST_F(MoeGroupedGemm, RejectsBadArguments) {
  Dev<uint16_t> buf(size_t(1) << 16);
  Dev<int32_t> offsets(std::vector<int32_t>(600, 0));
  auto call = [&](void* out, const void* a, const int32_t* off, const void* w, int e, int n, int k, int rows) {
    cuda::moe_grouped_gemm(out, a, off, w, e, n, k, rows, nullptr, 0, nullptr);
  };
  uint16_t* p = buf.ptr;
  EXPECT_NO_THROW(call(p, p, offsets.ptr, p, 2, 64, 64, 16));
  EXPECT_THROW(call(p, p, offsets.ptr, p, 0, 64, 64, 16), Error);  // no experts
  EXPECT_THROW(call(p, p, offsets.ptr, p, cuda::kMoeGroupedGemmMaxExperts + 1, 8, 8, 16), Error);
  EXPECT_THROW(call(p, p, offsets.ptr, p, 2, 60, 64, 16), Error);   // n % 8
  EXPECT_THROW(call(p, p, offsets.ptr, p, 2, 64, 60, 16), Error);   // k % 8
  EXPECT_THROW(call(p, p, offsets.ptr, p, 2, 0, 64, 16), Error);    // n = 0
  EXPECT_THROW(call(p, p, offsets.ptr, p, 2, 64, -8, 16), Error);   // k < 0
  EXPECT_THROW(call(p, p, offsets.ptr, p, 2, 64, 64, -1), Error);   // max_rows < 0
  EXPECT_THROW(call(p, p, nullptr, p, 2, 64, 64, 16), Error);       // offsets
  EXPECT_THROW(call(nullptr, p, offsets.ptr, p, 2, 64, 64, 16), Error);
  EXPECT_THROW(call(p + 1, p, offsets.ptr, p, 2, 64, 64, 16), Error);  // 2-byte aligned out
  EXPECT_THROW(call(p, p + 4, offsets.ptr, p, 2, 64, 64, 16), Error);  // 8-byte aligned a
  EXPECT_THROW(call(p, p, offsets.ptr, p + 2, 2, 64, 64, 16), Error);  // 4-byte aligned w
  EXPECT_NO_THROW(call(nullptr, nullptr, offsets.ptr, nullptr, 2, 64, 64, 0));  // no rows: nothing to do
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace flashserve
