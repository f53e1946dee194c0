// Tensor: a non-owning view (data, dtype, device, row-major contiguous shape of at most 4 dims)
// that the Backend ops take; Buffer: an owning allocation made by a Backend. C++17-clean.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace flashserve {

enum class Device { kCpu, kCuda };

// A kI4 weight's companions on its device (kernels/int4_gemv.h has the layout the CUDA backend
// gives them; docs/QUANTIZATION.md).
struct Int4Params {
  const float* scales = nullptr;   // [groups, n]
  const uint8_t* zeros = nullptr;  // [groups, n]: 0..16
  const int32_t* perm = nullptr;   // [k] act-order: packed column j is input column perm[j]; or null
  int group_size = 0;              // columns per group (k for one group per row)
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  std::array<int64_t, 4> shape{};
  int ndim = 0;
  // kF8E4M3 weights (docs/FP8.md): one fp32 scale per row of dim 0, on the tensor's device;
  // row r of the weight is decode(codes[r, :]) * row_scale[r].
  const float* row_scale = nullptr;
  // Block-wise FP8 weights (kF8E4M3 without row_scale, docs/QUANTIZATION.md): weight (r, c) is
  // decode(codes[r, c]) * block_scale[(r / block_n) * block_scale_ld + c / block_k].
  const float* block_scale = nullptr;
  int block_n = 0, block_k = 0, block_scale_ld = 0;
  Int4Params int4;  // kI4 weights only

  Tensor() = default;
  Tensor(void* d, DType t, Device dev, std::initializer_list<int64_t> dims)
      : data(d), dtype(t), device(dev) {
    FS_CHECK(dims.size() <= 4, "tensors have at most 4 dimensions");
    for (int64_t s : dims) shape[ndim++] = s;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  int64_t dim(int i) const {
    FS_CHECK(i >= 0 && i < ndim, "dim ", i, " of a ", ndim, "-d tensor");
    return shape[i];
  }
  size_t bytes() const {
    return dtype == DType::kI4 ? size_t(numel()) / 2 : size_t(numel()) * dtype_size(dtype);
  }
  template <class T>
  T* as() const {
    FS_CHECK(dtype == type_of<T>(), "tensor is ", dtype_name(dtype), ", not ",
             dtype_name(type_of<T>()));
    return static_cast<T*>(data);
  }
  // The same memory seen with another shape of equal numel.
  Tensor view(std::initializer_list<int64_t> dims) const {
    Tensor t(data, dtype, device, dims);
    FS_CHECK(t.numel() == numel(), "view changes numel ", numel(), " -> ", t.numel());
    return t;
  }
  // Rows [begin, begin + count) of dim 0 (contiguous, so still a plain view).
  Tensor rows(int64_t begin, int64_t count) const {
    FS_CHECK(ndim >= 1 && begin >= 0 && count >= 0 && begin + count <= shape[0], "rows ", begin,
             "+", count, " of ", ndim >= 1 ? shape[0] : 0);
    FS_CHECK(dtype != DType::kI4, "rows of an int4 weight cannot be viewed alone");
    FS_CHECK(!block_scale || begin % block_n == 0, "rows of a block-wise FP8 weight start on a ",
             "block of ", block_n, " rows, not at ", begin);
    Tensor t = *this;
    t.shape[0] = count;
    t.data = static_cast<char*>(data) + size_t(begin) * (bytes() / size_t(shape[0] ? shape[0] : 1));
    if (row_scale) t.row_scale = row_scale + begin;
    if (block_scale) t.block_scale = block_scale + (begin / block_n) * block_scale_ld;
    return t;
  }

 private:
  template <class T>
  static constexpr DType type_of() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, int32_t>,
                  "as<T>() is for float and int32_t; 16-bit types go through raw pointers");
    return std::is_same_v<T, float> ? DType::kF32 : DType::kI32;
  }
};

// An owning allocation: `tensor` views it; the storage is released through the backend that
// made it when the last copy of the Buffer goes away.
struct Buffer {
  Tensor tensor;
  std::shared_ptr<void> storage;
};

}  // namespace flashserve
