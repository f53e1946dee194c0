// HostUpload (backends/cuda/host_upload.h): chunked, double-buffered weight uploads.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include "backends/cuda/host_upload.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/cuda_check.h"
#include "weights/every_core.h"

namespace flashserve {

namespace {

// Pieces a chunk is split into for the cores: large enough that each thread streams for a
// while, small enough that 16 cores all get some of a 64 MiB chunk.
constexpr size_t kPieceBytes = size_t(2) << 20;

}  // namespace

HostUpload::HostUpload(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {
  for (Slot& s : slots_) {
    CUDA_CHECK(cudaHostAlloc(&s.host, chunk_bytes_, cudaHostAllocDefault));
    CUDA_CHECK(cudaEventCreateWithFlags(&s.sent, cudaEventDisableTiming));
  }
}

HostUpload::~HostUpload() {
  for (Slot& s : slots_) {
    if (s.sent) {
      cudaEventSynchronize(s.sent);  // the DMA may still read the buffer
      cudaEventDestroy(s.sent);
    }
    if (s.host) cudaFreeHost(s.host);
  }
}

void HostUpload::copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  auto* out = static_cast<char*>(dst);
  auto* in = static_cast<const char*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk_bytes_, bytes - done);
    Slot& slot = slots_[next_];
    next_ ^= 1;
    CUDA_CHECK(cudaEventSynchronize(slot.sent));  // its previous chunk has left
    char* staged = static_cast<char*>(slot.host);
    const size_t pieces = (n + kPieceBytes - 1) / kPieceBytes;
    if (pieces == 1) {
      std::memcpy(staged, in + done, n);
    } else {
      for_each_on_every_core(pieces, [&](size_t i) {
        const size_t off = i * kPieceBytes, len = std::min(kPieceBytes, n - off);
        std::memcpy(staged + off, in + done + off, len);
      });
    }
    CUDA_CHECK(cudaMemcpyAsync(out + done, staged, n, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(slot.sent, stream));
    done += n;
  }
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
