// int4_layout_codes (kernels/int4_layout.h): one thread per 32-bit word of the CUDA layout, each
// gathering its 8 codes from the checkpoint's words. The reads of GPTQ and AWQ words are strided
// (they pack along the other dimension), which costs little next to the upload: a 7B model's
// codes are 3.3 GB and the kernel runs once per weight at load.
#include <cstdint>

#include "core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/int4_gemv.h"
#include "kernels/int4_layout.h"

namespace flashserve::cuda {

namespace {

constexpr int kUnitCols = 128;  // packed columns per unit of a row (kernels/int4_gemv.h)
constexpr int kWordsPerUnit = 16;  // 64 bytes

// kAwqNibble[j] == j / 2 + 4 (j % 2): the device computes it rather than reading a host array.
constexpr bool awq_nibbles_match() {
  for (int j = 0; j < 8; ++j)
    if (kAwqNibble[j] != j / 2 + 4 * (j % 2)) return false;
  return true;
}
static_assert(awq_nibbles_match(), "AWQ nibble order");

// The code of input column i of row o (weights/int4_packing.h).
__device__ uint32_t stored_code(const uint32_t* __restrict__ words, Int4Packing packing, int n,
                                int k, int o, int i) {
  if (packing == Int4Packing::kRows)
    return (__ldg(words + size_t(o) * (k / 8) + i / 8) >> (4 * (i % 8))) & 0xF;
  if (packing == Int4Packing::kGptq)
    return (__ldg(words + size_t(i / 8) * n + o) >> (4 * (i % 8))) & 0xF;
  const int j = o % 8;
  return (__ldg(words + size_t(i) * (n / 8) + o / 8) >> (4 * (j / 2 + 4 * (j % 2)))) & 0xF;
}

__global__ void layout_codes_kernel(uint32_t* __restrict__ codes,  // [n, row_words]
                                    const uint32_t* __restrict__ words, Int4Packing packing,
                                    const int32_t* __restrict__ perm, int n, int k, int row_words) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * row_words) return;
  const int o = int(i / row_words), wi = int(i % row_words);
  // Word wi of a row: unit u, quad lane t, word wd; its 8 packed columns c.. (int4_gemv.h).
  const int u = wi / kWordsPerUnit, t = (wi % kWordsPerUnit) / 4, wd = wi % 4;
  const int c = u * kUnitCols + 32 * wd + 8 * t;
  uint32_t word = 0;  // padding past k stays code 0
  if (c < k)
    for (int s = 0; s < 8; ++s) {
      const int col = perm ? __ldg(perm + c + s) : c + s;
      // Column c + 2 p in bits 4 p, column c + 2 p + 1 in bits 16 + 4 p.
      word |= stored_code(words, packing, n, k, o, col) << (s % 2 ? 16 + 4 * (s / 2) : 4 * (s / 2));
    }
  codes[i] = word;
}

}  // namespace

void int4_layout_codes(uint8_t* codes, const uint32_t* words, Int4Packing packing,
                       const int32_t* perm, int n, int k, cudaStream_t stream) {
  const bool rows_packed = packing != Int4Packing::kRows;
  FS_CHECK(n >= 0 && k > 0 && k % 8 == 0 && (!rows_packed || n % 8 == 0),
           "int4_layout_codes: bad shape ", n, "x", k);
  const int row_words = int4_row_bytes(k) / 4;
  const int64_t total = int64_t(n) * row_words;
  if (total == 0) return;
  constexpr int kThreads = 256;
  layout_codes_kernel<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<uint32_t*>(codes), words, packing, perm, n, k, row_words);
  CUDA_CHECK_LAUNCH();
}

}  // namespace flashserve::cuda
