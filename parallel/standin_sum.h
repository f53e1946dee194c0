// The all-reduce both CPU stand-ins compute (threads: local_communicator.cpp; processes:
// tcp_standin_communicator.cpp) once every rank's buffer is at hand: the f32 sum in
// reduction_order.h's order, bf16 inputs widened first and rounded once at the end. The same
// code on the same inputs gives the same bits on every rank and in both stand-ins.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "parallel/reduction_order.h"

namespace flashserve {

// sum[i] = the fixed-order sum over ranks r of in[r][i].
inline void fixed_order_sum(const std::vector<const void*>& in,  // [ranks] each [count] of dtype
                            int64_t count, DType dtype,
                            std::vector<float>* sum) {  // [count]
  auto load = [&](int r, int64_t i) {
    return dtype == DType::kF32 ? static_cast<const float*>(in[size_t(r)])[i]
                                : bf16_bits_to_float(static_cast<const uint16_t*>(in[size_t(r)])[i]);
  };
  sum->resize(size_t(count));
  for (int64_t i = 0; i < count; ++i)
    (*sum)[size_t(i)] = pairwise_sum<float>(0, int(in.size()), [&](int r) { return load(r, i); });
}

// out = sum in dtype (f32 copied, bf16 rounded).
inline void store_sum(const std::vector<float>& sum, DType dtype, void* out) {  // out: [sum.size()]
  if (dtype == DType::kF32) {
    std::memcpy(out, sum.data(), sum.size() * 4);
  } else {
    uint16_t* o = static_cast<uint16_t*>(out);
    for (size_t i = 0; i < sum.size(); ++i) o[i] = float_to_bf16_bits(sum[i]);
  }
}

}  // namespace flashserve
