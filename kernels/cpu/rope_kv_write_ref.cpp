// CPU twins of RoPE and the KV-cache write: plain loops, the rotation angle in double.
#include "kernels/cpu/rope_kv_write_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace flashserve::ref {

void rope(float* q, float* k, const int32_t* positions, const float* inv_freq, int64_t n,
          int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim) {
  const int64_t half = head_dim / 2, d = head_dim;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < n; ++t) {
    const double pos = positions[t];
    for (int64_t i = 0; i < half; ++i) {  // angle in double: large positions keep precision
      const double a = pos * double(inv_freq[i]);
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
    turn(q, num_q_heads);
    turn(k, num_kv_heads);
  }
}

void write_kv(void* k_cache, void* v_cache, const void* k, const void* v, const int32_t* slots,
              int64_t n, int64_t row_bytes, int64_t num_slots) {
  for (int64_t t = 0; t < n; ++t) {
    const int32_t slot = slots[t];
    FS_CHECK(slot < num_slots, "write_kv: slot ", slot, " of ", num_slots);
    if (slot < 0) continue;
    std::memcpy(static_cast<char*>(k_cache) + slot * row_bytes,
                static_cast<const char*>(k) + t * row_bytes, size_t(row_bytes));
    std::memcpy(static_cast<char*>(v_cache) + slot * row_bytes,
                static_cast<const char*>(v) + t * row_bytes, size_t(row_bytes));
  }
}

void qkv_rope_write_kv(float* q, float* k_cache, float* v_cache, const float* qkv,
                       const int32_t* positions, const float* inv_freq, const int32_t* slots,
                       int64_t n, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
                       int64_t num_slots, float* kv_rows) {
  const int64_t hq = num_q_heads, hkv = num_kv_heads, d = head_dim;
  const int64_t width = (hq + 2 * hkv) * d;
  float* kp = kv_rows;
  float* vp = kv_rows + n * hkv * d;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = qkv + t * width;
    std::memcpy(q + t * hq * d, row, size_t(hq * d) * 4);
    std::memcpy(kp + t * hkv * d, row + hq * d, size_t(hkv * d) * 4);
    std::memcpy(vp + t * hkv * d, row + (hq + hkv) * d, size_t(hkv * d) * 4);
  }
  rope(q, kp, positions, inv_freq, n, hq, hkv, d);
  write_kv(k_cache, v_cache, kp, vp, slots, n, hkv * d * 4, num_slots);
}

}  // namespace flashserve::ref
