// Int4 weight-only matmul of decode steps (kernels/int4_gemv.h): out[m, n] = x[m, k] · dequant(w)ᵀ
// for m <= 16, the act-order gather of x, and the dequantization to bf16 for larger steps.
// The matmul is one pass over the codes, so the job is to keep enough of them in flight. A
// persistent grid (SMs x resident blocks) walks the 16-row tiles; a block's 8 warps split k, warp
// w owning the same run of 128-column units in every tile, and each warp streams its units
// through its own cp.async ring of kStages shared-memory slots (a unit of the tile's 16 rows and
// its groups' scales and zeros), kStages - 1 units ahead across tiles; the first are issued before
// pdl_wait (only weights are read before it). A word of codes becomes four bf16 pairs (q - zero)
// by mask, OR (bf16 128 + q) and one subtraction of 128 + zero, all exact; a pair of m16n8k16
// mmas takes them against x's 16-byte vector of the same 8 columns, and each 32-column run (one
// group) is scaled once per output. At each tile's end the warps' sums meet in shared memory in
// a fixed order (bitwise-repeatable results).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/skinny_gemm.cuh"
#include "kernels/int4_gemv.h"

namespace flashserve::cuda {
namespace {

using skinny::bf16;

constexpr int kWarps = 8;       // warps per block, splitting k
constexpr int kStages = 6;      // ring slots per warp: 5 units in flight while one is computed
constexpr int kTileRows = 16;   // w rows per tile: one mma A tile
constexpr int kUnitCols = 128;  // packed columns per unit: 64 bytes of a row, 16 per quad lane
constexpr int kUnitBytes = 64;

struct Int4Args {
  void* out;             // [m, n] bf16 or f32
  const bf16* x;         // [m, k], packed column order
  const uint8_t* codes;  // [n, row_bytes]
  const float* scales;   // [groups, n]
  const uint8_t* zeros;  // [groups, n]
  int m, n, k, group_size, groups, row_bytes;
  int group_units;  // group_size >= 128: units per group (one group per row: all the units)
};

// One ring slot: unit u of a tile (rows row0..row0 + 15) and its kRuns groups' scales and zero
// points. A group's 16 entries lie at base = group * n + row0 of [groups, n], not necessarily
// 16-byte aligned, so whole 16-byte pieces are copied from the boundary at or below base:
// `offset` = base % 16, and row r's zero is zeros[offset + r], its scale scales[offset % 4 + r].
template <int kRuns>
struct alignas(16) Slot {
  uint8_t codes[kTileRows][kUnitBytes];  // 64 bytes a row: lanes g, g + 1 hit other banks
  float scales[kRuns][20];               // 5 pieces: 16 entries 0..3 past a boundary
  uint8_t zeros[kRuns][32];              // 2 pieces: 16 entries 0..15 past a boundary
  int offset[4];                         // [kRuns]
};

// A 16-byte cp.async of which the first `bytes` (0..16) are read and the rest zero-filled.
__device__ __forceinline__ void copy16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(detail::smem_addr(dst)),
               "l"(src), "r"(bytes)
               : "memory");
}

// What one lane copies of each unit of its warp, worked out once: code pieces lane and lane + 32
// (rows lane / 4 and lane / 4 + 8, 16 bytes each; rows past n are zero-filled) and, for lane <
// 7 kRuns, piece lane % 7 of run lane / 7's window: scales (pieces 0..4) or zeros (5, 6). Only
// what the layout wrote is read, so copies may be issued before pdl_wait.
template <int kRuns, int kGroupWords>
struct UnitCopy {
  int code_row;        // the first of this lane's two rows in a tile
  size_t code_at;      // its piece's offset from the tile's unit in codes
  int run;             // window: run of the unit (lane < 7 kRuns)
  bool window;         // copies a window piece
  const uint8_t* src;  // a.scales or a.zeros
  int esize, mask, first, len;  // entry bytes, boundary mask, first entry, entries of a piece
  int dst;             // the piece's byte offset in a slot

  __device__ UnitCopy(const Int4Args& a, int lane) {
    code_row = lane / 4;
    code_at = size_t(code_row) * a.row_bytes + 16 * (lane % 4);
    window = lane < 7 * kRuns;
    run = window ? lane / 7 : 0;
    const int piece = lane % 7;
    const bool scale = piece < 5;
    src = scale ? reinterpret_cast<const uint8_t*>(a.scales) : a.zeros;
    esize = scale ? 4 : 1;
    mask = scale ? ~3 : ~15;
    first = scale ? 4 * piece : 16 * (piece - 5);
    len = 16 / esize;
    dst = scale ? int(offsetof(Slot<kRuns>, scales)) + 4 * (20 * run + first)
                : int(offsetof(Slot<kRuns>, zeros)) + 32 * run + first;
  }

  // Copies unit u of the tile at row0 into `slot`; grp: the group of the unit's first run. Runs
  // past k are neither copied nor read.
  __device__ __forceinline__ void operator()(const Int4Args& a, Slot<kRuns>& slot, int row0, int u,
                                             int grp, int lane) const {
    uint8_t* out = reinterpret_cast<uint8_t*>(&slot);
    const uint8_t* unit = a.codes + size_t(row0) * a.row_bytes + size_t(u) * kUnitBytes + code_at;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool ok = row0 + code_row + 8 * h < a.n;
      copy16(out + 16 * lane + 512 * h, ok ? unit + size_t(8 * h) * a.row_bytes : a.codes,
             ok ? 16 : 0);
    }
    if (window && u * kUnitCols + 32 * kGroupWords * run < a.k) {
      const int base = (grp + run) * a.n + row0, at = (base & mask) + first;
      const int entries = max(0, min(len, a.groups * a.n - at));  // the last pieces of [groups, n]
      copy16(out + dst, entries > 0 ? src + size_t(at) * esize : src, entries * esize);
      if (lane == 7 * run) slot.offset[run] = base & 15;
    }
  }
};

// Four bf16 pairs (q - zero) from one word of codes (pair s: columns 2s, 2s + 1 of its 8), as mma
// A registers. zero2: the bf16 pair (128 + zero, 128 + zero).
__device__ __forceinline__ void dequant_word(uint32_t word, uint32_t zero2, uint32_t (&a)[4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t biased = ((word >> (4 * s)) & 0x000F000Fu) | 0x43004300u;  // 128 + q, exact
    const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                     *reinterpret_cast<const __nv_bfloat162*>(&zero2));
    a[s] = *reinterpret_cast<const uint32_t*>(&d);
  }
}

__device__ __forceinline__ uint32_t zero_pair(uint32_t zero) { return 0x43004300u + zero * 0x00010001u; }

// acc += unit u of the slot times x: kNT n8 tiles of x rows (m <= 8 kNT); kGroupWords:
// 32-column words per group run (1, 2, or 4 when a group spans a whole unit). xrow: this lane's x
// rows (8 nt + g, columns from 8 t), xok: whether they exist.
template <int kNT, int kGroupWords>
__device__ __forceinline__ void unit_product(const Int4Args& a, const Slot<4 / kGroupWords>& slot,
                                             int u, const bf16* const (&xrow)[kNT],
                                             const bool (&xok)[kNT], int g, int t,
                                             float (&acc)[kNT][4]) {
  constexpr int kRuns = 4 / kGroupWords;
  const uint4 lo4 = *reinterpret_cast<const uint4*>(&slot.codes[g][16 * t]);      // row g
  const uint4 hi4 = *reinterpret_cast<const uint4*>(&slot.codes[g + 8][16 * t]);  // row g + 8
  const uint32_t* lo = &lo4.x;
  const uint32_t* hi = &hi4.x;
  const int left = a.k - u * kUnitCols - 8 * t;  // this lane's columns of the unit within k: from 8 t
  const bf16* xu[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) xu[nt] = xrow[nt] + u * kUnitCols;
#pragma unroll
  for (int r = 0; r < kRuns; ++r) {
    if (u * kUnitCols + 32 * kGroupWords * r >= a.k) break;  // warp-uniform: past k
    const int off = slot.offset[r];
    const float s0 = slot.scales[r][(off & 3) + g], s1 = slot.scales[r][(off & 3) + g + 8];
    const uint32_t z0 = zero_pair(slot.zeros[r][off + g]), z1 = zero_pair(slot.zeros[r][off + g + 8]);
    float run[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) run[nt][0] = run[nt][1] = run[nt][2] = run[nt][3] = 0.f;
#pragma unroll
    for (int ww = 0; ww < kGroupWords; ++ww) {
      const int w = r * kGroupWords + ww;
      uint32_t d0[4], d1[4];
      dequant_word(lo[w], z0, d0);
      dequant_word(hi[w], z1, d1);
      const uint32_t a_lo[4] = {d0[0], d1[0], d0[1], d1[1]}, a_hi[4] = {d0[2], d1[2], d0[3], d1[3]};
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const uint4 xv = xok[nt] && 32 * w < left ? skinny::load_act(xu[nt] + 32 * w)
                                                   : make_uint4(0, 0, 0, 0);
        const uint32_t b_lo[2] = {xv.x, xv.y}, b_hi[2] = {xv.z, xv.w};
        detail::mma_m16n8k16<bf16>(run[nt], a_lo, b_lo);
        detail::mma_m16n8k16<bf16>(run[nt], a_hi, b_hi);
      }
    }
    // C fragment: c0, c1 belong to w row g, c2, c3 to row g + 8.
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      acc[nt][0] = fmaf(run[nt][0], s0, acc[nt][0]);
      acc[nt][1] = fmaf(run[nt][1], s0, acc[nt][1]);
      acc[nt][2] = fmaf(run[nt][2], s1, acc[nt][2]);
      acc[nt][3] = fmaf(run[nt][3], s1, acc[nt][3]);
    }
  }
}

template <int kNT, int kGroupWords, class Out>
__global__ void __launch_bounds__(kWarps * 32, 2) int4_gemv_kernel(const __grid_constant__ Int4Args a) {
  constexpr int kRuns = 4 / kGroupWords;  // group runs per unit
  extern __shared__ uint4 ring_smem[];    // [kWarps][kStages] Slot<kRuns>
  __shared__ float partial[2][kWarps][kNT * 4][32];  // by tile parity: one barrier per tile
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid / 32, g = lane >> 2, t = lane & 3;
  Slot<kRuns>* ring = reinterpret_cast<Slot<kRuns>*>(ring_smem) + warp * kStages;
  const int tiles = (a.n + kTileRows - 1) / kTileRows, units = (a.k + kUnitCols - 1) / kUnitCols;
  const int my_tiles = (tiles - 1 - int(blockIdx.x)) / int(gridDim.x) + 1;  // blockIdx.x < tiles
  // This warp's units of every tile: u_begin .. u_begin + count - 1 (count may be 0).
  const int per_warp = (units + kWarps - 1) / kWarps, u_begin = warp * per_warp;
  const int count = max(0, min(per_warp, units - u_begin)), items = count * my_tiles;
  // Groups of size >= 128 hold whole units: u_begin's group and its place in it, for the cursor.
  const int grp_begin = kGroupWords == 4 ? u_begin / a.group_units : 0;
  const int in_begin = kGroupWords == 4 ? u_begin - grp_begin * a.group_units : 0;

  // The fill cursor: item `fill` (the j-th unit of tile `fill_tile`) goes to slot fill_slot, one
  // cp.async group per call (empty past the last item) so that group i holds item i.
  const UnitCopy<kRuns, kGroupWords> copier(a, lane);
  int fill = 0, fill_slot = 0, fill_tile = blockIdx.x, fill_j = 0, fill_grp = grp_begin,
      fill_in = in_begin;
  auto issue = [&] {
    if (fill < items) {
      const int u = u_begin + fill_j;
      const int grp = kGroupWords == 4 ? fill_grp : u * kRuns;
      copier(a, ring[fill_slot], fill_tile * kTileRows, u, grp, lane);
      if (kGroupWords == 4 && ++fill_in == a.group_units) fill_in = 0, ++fill_grp;
      if (++fill_j == count) {
        fill_j = 0, fill_tile += gridDim.x, fill_grp = grp_begin, fill_in = in_begin;
      }
    }
    ++fill;
    fill_slot = fill_slot + 1 == kStages ? 0 : fill_slot + 1;
    detail::cp_async_commit();
  };
#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) issue();
  pdl_wait();

  const bf16* xrow[kNT];
  bool xok[kNT];
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int xr = nt * 8 + g;
    xok[nt] = xr < a.m;
    xrow[nt] = a.x + size_t(xok[nt] ? xr : 0) * a.k + 8 * t;
  }
  Out* out = static_cast<Out*>(a.out);
  int slot = 0;
  for (int i = 0; i < my_tiles; ++i) {
    float acc[kNT][4];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
    for (int j = 0; j < count; ++j) {
      issue();  // item i count + j + kStages - 1, into the slot read last
      detail::cp_async_wait<kStages - 1>();  // this lane's copies of item i count + j landed
      __syncwarp();                          // and the other lanes'
      unit_product<kNT, kGroupWords>(a, ring[slot], u_begin + j, xrow, xok, g, t, acc);
      __syncwarp();  // the slot is read before the next issue() refills it
      slot = slot + 1 == kStages ? 0 : slot + 1;
    }

    float(*part)[kNT * 4][32] = partial[i & 1];
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) part[warp][nt * 4 + c][lane] = acc[nt][c];
    __syncthreads();
    const int row0 = (int(blockIdx.x) + i * int(gridDim.x)) * kTileRows;
    for (int idx = tid; idx < kNT * 4 * 32; idx += kWarps * 32) {
      const int e = idx / 32, l = idx % 32;
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += part[w][e][l];
      // Accumulator c of tile nt in lane l: w row l / 4 (+ 8 for c >= 2), x row 8 nt + 2 (l % 4)
      // (+ 1 for odd c): the m16n8 C fragment layout.
      const int c = e % 4, nt = e / 4;
      const int row = row0 + l / 4 + 8 * (c / 2), xr = 8 * nt + 2 * (l % 4) + c % 2;
      if (row < a.n && xr < a.m) skinny::store_out(out + size_t(xr) * a.n + row, s);
    }
  }
}

// A persistent grid: as many blocks as fit on the GPU at once, at most one per tile. The
// kernel's attribute and that count are worked out once per device (this runs per matmul).
template <int kNT, int kGroupWords, class Out>
void launch_gemv(const Int4Args& a, cudaStream_t stream) {
  auto kernel = int4_gemv_kernel<kNT, kGroupWords, Out>;
  constexpr int smem = kWarps * kStages * int(sizeof(Slot<4 / kGroupWords>));
  static thread_local int cached_device = -1, resident = 0;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device != cached_device) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    int sms = 0, per_sm = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, smem));
    cached_device = device, resident = sms * std::max(per_sm, 1);
  }
  const int tiles = (a.n + kTileRows - 1) / kTileRows;
  const dim3 grid(std::min(tiles, resident)), block(kWarps * 32);
  launch_pdl(kernel, grid, block, smem, stream, a);
  CUDA_CHECK_LAUNCH();
}

template <int kNT, class Out>
void launch_groups(const Int4Args& a, cudaStream_t stream) {
  if (a.group_size == 32)
    launch_gemv<kNT, 1, Out>(a, stream);
  else if (a.group_size == 64)
    launch_gemv<kNT, 2, Out>(a, stream);
  else
    launch_gemv<kNT, 4, Out>(a, stream);  // a multiple of 128, or one group per row
}

// xp[r, j] = x[r, perm[j]], one element a thread.
__global__ void gather_columns_kernel(uint16_t* __restrict__ xp, const uint16_t* __restrict__ x,
                                      const int32_t* __restrict__ perm, int m, int k) {
  pdl_trigger();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(m) * k) return;
  const int64_t r = i / k, j = i - r * k;
  xp[i] = x[r * k + __ldg(perm + j)];
}

// One thread per word of codes: its 8 columns, each to its input column.
__global__ void dequantize_kernel(bf16* __restrict__ w, const uint8_t* __restrict__ codes,
                                  const float* __restrict__ scales,
                                  const uint8_t* __restrict__ zeros,
                                  const int32_t* __restrict__ perm, int n, int k, int group_size,
                                  int row_bytes) {
  const int words = row_bytes / 4;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * words) return;
  const int o = int(i / words), wi = int(i % words);
  const int u = wi / 16, t = (wi % 16) / 4, wd = wi % 4;
  const int c = u * kUnitCols + 32 * wd + 8 * t;
  if (c >= k) return;  // padding
  const uint32_t word = __ldg(reinterpret_cast<const uint32_t*>(codes + size_t(o) * row_bytes) + wi);
  const size_t at = size_t(c / group_size) * n + o;
  const float scale = __ldg(scales + at);
  const int zero = __ldg(zeros + at);
  for (int s = 0; s < 8; ++s) {
    const int q = (word >> (s % 2 ? 16 + 4 * (s / 2) : 4 * (s / 2))) & 0xF;
    const int col = c + s;
    w[size_t(o) * k + (perm ? __ldg(perm + col) : col)] = __float2bfloat16(float(q - zero) * scale);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int int4_row_bytes(int k) { return (k + kUnitCols - 1) / kUnitCols * kUnitBytes; }

Int4GpuLayout int4_gpu_layout(const uint8_t* packed, const float* scales, const uint8_t* zeros,
                              int n, int k, int group_size) {
  FS_CHECK(n > 0 && k > 0 && k % 8 == 0 && group_size > 0 && k % group_size == 0,
           "int4 layout: bad shape ", n, "x", k, " group ", group_size);
  const int groups = k / group_size, row_bytes = int4_row_bytes(k);
  Int4GpuLayout out;
  out.codes.assign(size_t(n) * row_bytes, 0);
  out.scales.resize(size_t(groups) * n);
  out.zeros.resize(size_t(groups) * n);
  for (int o = 0; o < n; ++o) {
    const uint8_t* row = packed + size_t(o) * (k / 2);
    auto code = [&](int c) -> uint32_t { return c < k ? (c % 2 ? row[c / 2] >> 4 : row[c / 2] & 0xF) : 0; };
    for (int wi = 0; wi < row_bytes / 4; ++wi) {
      const int u = wi / 16, t = (wi % 16) / 4, wd = wi % 4;
      const int c = u * kUnitCols + 32 * wd + 8 * t;
      uint32_t word = 0;
      for (int s = 0; s < 4; ++s) word |= code(c + 2 * s) << (4 * s) | code(c + 2 * s + 1) << (16 + 4 * s);
      for (int b = 0; b < 4; ++b) out.codes[size_t(o) * row_bytes + 4 * wi + b] = uint8_t(word >> (8 * b));
    }
    for (int gi = 0; gi < groups; ++gi) {
      out.scales[size_t(gi) * n + o] = scales[size_t(o) * groups + gi];
      out.zeros[size_t(gi) * n + o] = zeros[size_t(o) * groups + gi];
    }
  }
  return out;
}

bool int4_gemv_supported(int m, int k, int group_size, const void* x, const void* out) {
  const bool groups_ok = group_size == 32 || group_size == 64 ||
                         (group_size > 0 && group_size % 128 == 0) || group_size == k;
  return m >= 1 && m <= kInt4GemvMaxRows && k > 0 && k % 8 == 0 && groups_ok &&
         k % group_size == 0 && aligned16(x) && aligned16(out);
}

void int4_gemv(void* out, bool out_f32, const void* x, const uint8_t* codes, const float* scales,
               const uint8_t* zeros, int m, int n, int k, int group_size, cudaStream_t stream) {
  FS_CHECK(int4_gemv_supported(m, k, group_size, x, out), "int4_gemv: unsupported m ", m, " k ",
           k, " group ", group_size, " or unaligned pointers");
  if (n == 0) return;
  // The kernel copies whole 16-byte pieces of the layout and indexes scales and zeros in int.
  FS_CHECK(aligned16(codes) && aligned16(scales) && aligned16(zeros),
           "int4_gemv: codes, scales and zeros must be 16-byte aligned");
  FS_CHECK(int64_t(k / group_size) * n < INT_MAX - 64, "int4_gemv: ", n, "x", k, " group ",
           group_size, " has too many scales");
  const int units = (k + kUnitCols - 1) / kUnitCols;
  const Int4Args a{out, static_cast<const bf16*>(x), codes, scales, zeros,
                   m, n, k, group_size, k / group_size, int4_row_bytes(k),
                   group_size % kUnitCols == 0 ? group_size / kUnitCols : units};
  if (m <= 8 && out_f32)
    launch_groups<1, float>(a, stream);
  else if (m <= 8)
    launch_groups<1, bf16>(a, stream);
  else if (out_f32)
    launch_groups<2, float>(a, stream);
  else
    launch_groups<2, bf16>(a, stream);
}

void int4_gather_columns(void* xp, const void* x, const int32_t* perm, int m, int k,
                         cudaStream_t stream) {
  const int64_t total = int64_t(m) * k;
  if (total == 0) return;
  constexpr int kThreads = 256;
  launch_pdl(gather_columns_kernel, dim3(unsigned((total + kThreads - 1) / kThreads)),
             dim3(kThreads), 0, stream, static_cast<uint16_t*>(xp),
             static_cast<const uint16_t*>(x), perm, m, k);
  CUDA_CHECK_LAUNCH();
}

void int4_dequantize_bf16(void* w, const uint8_t* codes, const float* scales, const uint8_t* zeros,
                          const int32_t* perm, int n, int k, int group_size, cudaStream_t stream) {
  FS_CHECK(k % 8 == 0 && group_size > 0 && k % group_size == 0, "int4_dequantize_bf16: k ", k,
           " group ", group_size);
  const int row_bytes = int4_row_bytes(k);
  const int64_t total = int64_t(n) * (row_bytes / 4);
  if (total == 0) return;
  constexpr int kThreads = 256;
  dequantize_kernel<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      static_cast<bf16*>(w), codes, scales, zeros, perm, n, k, group_size, row_bytes);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda
