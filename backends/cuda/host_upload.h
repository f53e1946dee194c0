// HostUpload: host-to-device copies of weights at load, through pinned staging buffers. A
// copy from pageable memory (the mapped checkpoint) goes through the driver's own small staging
// buffer, one thread, with the page faults of the mapping serialised in front of it: about
// 1-1.5 GB/s. Here every core copies a chunk into one of two pinned buffers while the DMA engine
// sends the other, so reading the page cache and the PCIe transfer overlap.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace flashserve {

class HostUpload {
 public:
  explicit HostUpload(size_t chunk_bytes = size_t(64) << 20);
  ~HostUpload();
  HostUpload(const HostUpload&) = delete;
  HostUpload& operator=(const HostUpload&) = delete;

  // Queues dst[0, bytes) = src[0, bytes) on `stream` and returns once src has been read (the
  // last chunk may still be in flight: later work on `stream` sees it, the host need not wait).
  void copy(void* dst,        // [bytes] device memory
            const void* src,  // [bytes] host memory, any kind
            size_t bytes, cudaStream_t stream);

 private:
  struct Slot {
    void* host = nullptr;        // [chunk_bytes_] pinned
    cudaEvent_t sent = nullptr;  // the copy out of `host` finished
  };
  size_t chunk_bytes_;
  Slot slots_[2];
  int next_ = 0;
};

}  // namespace flashserve
