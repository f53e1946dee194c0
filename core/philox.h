// Philox4x32-10 counter-based random numbers (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11). A pure function of (key, counter): the sampler keys it with a request's
// seed and counts with the request's step, so a token never depends on its batch neighbours.
// C++17-clean and callable from device code, so the CUDA sampler can draw the same stream.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FS_PHILOX_FN __host__ __device__ __forceinline__
#else
#define FS_PHILOX_FN inline
#endif

namespace flashserve {

struct Philox4x32 {
  uint32_t v[4];
};

namespace detail {
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

FS_PHILOX_FN void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  *lo = uint32_t(p);
}
}  // namespace detail

// Ten rounds of the Philox S-box on `counter` under `key`; the key is bumped between rounds.
FS_PHILOX_FN Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  uint32_t c0 = counter.v[0], c1 = counter.v[1], c2 = counter.v[2], c3 = counter.v[3];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += detail::kPhiloxW0;
      key1 += detail::kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    detail::philox_mulhilo(detail::kPhiloxM0, c0, &hi0, &lo0);
    detail::philox_mulhilo(detail::kPhiloxM1, c2, &hi1, &lo1);
    const uint32_t n0 = hi1 ^ c1 ^ key0, n2 = hi0 ^ c3 ^ key1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  Philox4x32 out = {{c0, c1, c2, c3}};
  return out;
}

// Four 32-bit words for (seed, step, index): `index` numbers the draws within one step.
FS_PHILOX_FN Philox4x32 philox_draw(uint64_t seed, uint64_t step, uint32_t index = 0) {
  Philox4x32 counter = {{uint32_t(step), uint32_t(step >> 32), index, 0u}};
  return philox4x32_10(counter, uint32_t(seed), uint32_t(seed >> 32));
}

// A uniform float in [0, 1) from the top 24 bits of a word (every value exactly representable).
FS_PHILOX_FN float philox_uniform(uint32_t word) { return float(word >> 8) * (1.0f / 16777216.0f); }

// A uniform double in [0, 1) with 53 random bits from two words (what the host sampler uses:
// 24 bits would bias tokens whose probability is below 2^-24 in a large vocabulary).
FS_PHILOX_FN double philox_uniform53(uint32_t hi_word, uint32_t lo_word) {
  const uint64_t bits = (uint64_t(hi_word >> 5) << 26) | uint64_t(lo_word >> 6);
  return double(bits) * (1.0 / 9007199254740992.0);
}

}  // namespace flashserve
