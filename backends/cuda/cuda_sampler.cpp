// The CUDA backend's token choice on the device (backends/cuda/cuda_backend.h): the argmax of
// greedy rows, and the GPU sampler fed with requests packed on the host.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <cstring>

#include "backends/cuda/cuda_backend.h"
#include "kernels/argmax.h"
#include "kernels/sample_rows.h"
#include "sampling/sample_pack.h"

namespace flashserve {

void CudaBackend::argmax_rows(Tensor ids, const Tensor& logits) {
  FS_CHECK(logits.dtype == DType::kF32 && ids.dtype == DType::kI32 && logits.ndim == 2 &&
               ids.numel() == logits.dim(0),
           "argmax_rows: shapes");
  cuda::argmax_rows_f32(ids.as<int32_t>(), logits.as<float>(), int(logits.dim(0)),
                        int(logits.dim(1)), stream_);
}

// Packs the requests on the host (sampling/sample_pack.h), uploads them and the step's grammar
// masks in one copy from pinned memory and runs one block per row (kernels/cuda/sampling.cu); only the ids come
// back.
void CudaBackend::sample_rows(int32_t* ids, const Tensor& logits, std::span<const int64_t> rows,
                 std::span<const SampleRequest> requests) {
  FS_CHECK(logits.dtype == DType::kF32 && logits.ndim == 2 && rows.size() == requests.size(),
           "sample_rows: shapes");
  const int n = int(rows.size()), vocab = int(logits.dim(1));
  if (n == 0) return;
  for (int64_t r : rows)
    FS_CHECK(r >= 0 && r < logits.dim(0), "sample_rows: row ", r, " of ", logits.dim(0));
  const SamplePack& pack = packer_.pack(rows, requests, vocab);
  auto align = [](size_t b) { return (b + 15) / 16 * 16; };
  const size_t args_b = align(pack.rows.size() * sizeof(SampleRowArgs));
  const size_t edits_b = align(pack.edits.size() * sizeof(TokenEdit));
  const size_t bias_b = align(pack.biases.size() * sizeof(float));
  const size_t mask_b = align(pack.masks.size() * sizeof(uint32_t));
  const size_t work_b = align(size_t(n) * vocab * 4), alive_b = align(size_t(n) * vocab);
  const size_t in_b = args_b + edits_b + bias_b + mask_b, total = in_b + work_b + alive_b + size_t(n) * 4;
  if (total > sample_ws_bytes_) {
    sample_ws_ = nullptr;
    sample_ws_ = allocate_bytes(total + total / 2);
    sample_ws_bytes_ = total + total / 2;
  }
  if (in_b > sample_in_bytes_) {
    sample_in_ = nullptr;  // the last call synchronized: no copy reads it
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, in_b + in_b / 2, cudaHostAllocDefault));
    sample_in_ = std::shared_ptr<char>(static_cast<char*>(p), [](char* q) { cudaFreeHost(q); });
    sample_in_bytes_ = in_b + in_b / 2;
  }
  char* in = sample_in_.get();  // the sections at their aligned offsets; padding is never read
  std::memcpy(in, pack.rows.data(), pack.rows.size() * sizeof(SampleRowArgs));
  std::memcpy(in + args_b, pack.edits.data(), pack.edits.size() * sizeof(TokenEdit));
  std::memcpy(in + args_b + edits_b, pack.biases.data(), pack.biases.size() * sizeof(float));
  std::memcpy(in + args_b + edits_b + bias_b, pack.masks.data(), pack.masks.size() * sizeof(uint32_t));
  char* ws = static_cast<char*>(sample_ws_.get());
  CUDA_CHECK(cudaMemcpyAsync(ws, in, in_b, cudaMemcpyHostToDevice, stream_));
  int32_t* d_ids = reinterpret_cast<int32_t*>(ws + in_b + work_b + alive_b);
  cuda::sample_rows_f32(d_ids, reinterpret_cast<float*>(ws + in_b),
                        reinterpret_cast<uint8_t*>(ws + in_b + work_b), logits.as<float>(),
                        reinterpret_cast<const SampleRowArgs*>(ws),
                        reinterpret_cast<const TokenEdit*>(ws + args_b),
                        reinterpret_cast<const float*>(ws + args_b + edits_b),
                        reinterpret_cast<const uint32_t*>(ws + args_b + edits_b + bias_b), n, vocab,
                        stream_);
  CUDA_CHECK(cudaMemcpyAsync(ids, d_ids, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
  synchronize();
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
