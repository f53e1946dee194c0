// The NCCL communicator: one ncclComm_t per GPU of this process, made together with
// ncclCommInitAll; each rank's collectives are queued on its backend's stream (bind_stream), so
// that they order with its ops and are recorded into its CUDA graphs (NCCL supports capture).
// Compiles to stubs that throw unless FLASHSERVE_HAS_NCCL.
#include "parallel/communicator.h"

#include "core/error.h"

#include <cstdlib>

namespace flashserve {

void prepare_cuda_for_tensor_parallelism(int tensor_parallel_size) {
  if (tensor_parallel_size > 1) setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
}

}  // namespace flashserve

#ifdef FLASHSERVE_HAS_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace flashserve {
namespace {

void nccl_check(ncclResult_t r, const char* what) {
  FS_CHECK(r == ncclSuccess, "NCCL ", what, " failed: ", ncclGetErrorString(r),
           r == ncclSystemError || r == ncclInternalError ? " (NCCL_DEBUG=WARN says more)" : "");
}

void cuda_check(cudaError_t e, const char* what) {
  FS_CHECK(e == cudaSuccess, what, " failed: ", cudaGetErrorString(e));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kI32: return ncclInt32;
    case DType::kF8E4M3:
    case DType::kI4: break;  // weights only, never communicated
  }
  FS_THROW("no NCCL type for ", dtype_name(t));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  ~NcclCommunicator() override {
    if (scratch_) cudaFree(scratch_);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    if (window_ && comm_) ncclCommWindowDeregister(comm_, window_);  // (collective, as made)
    if (symmetric_) ncclMemFree(symmetric_);
#endif
    if (comm_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  void bind_stream(void* stream) override {
    stream_ = static_cast<cudaStream_t>(stream);
    if (!scratch_) cuda_check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc (barrier)");
  }

  void all_reduce_sum(void* data, int64_t count, DType dtype) override {
    FS_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "all_reduce_sum of ",
             dtype_name(dtype), " (f32 or bf16)");
    nccl_check(ncclAllReduce(data, data, size_t(count), nccl_type(dtype), ncclSum, live(),
                             stream_),
               "all-reduce");
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    nccl_check(ncclAllGather(send, recv, size_t(count), nccl_type(dtype), live(), stream_),
               "all-gather");
  }

  void* symmetric_buffer(size_t bytes) override {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    if (!symmetric_) {
      nccl_check(ncclMemAlloc(&symmetric_, bytes), "ncclMemAlloc (symmetric memory)");
      nccl_check(ncclCommWindowRegister(live(), symmetric_, bytes, &window_, NCCL_WIN_COLL_SYMMETRIC),
                 "ncclCommWindowRegister (symmetric memory)");
      symmetric_bytes_ = bytes;
    }
    FS_CHECK(bytes <= symmetric_bytes_, "symmetric_buffer: ", bytes, " bytes asked, ",
             symmetric_bytes_, " registered (one buffer per communicator)");
    return symmetric_;
#else
    return nullptr;
#endif
  }

  void barrier() override {
    FS_CHECK(scratch_ != nullptr, "NCCL barrier before bind_stream");
    all_reduce_sum(scratch_, 1, DType::kF32);
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (barrier)");
  }

  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (comm_) ncclCommAbort(comm_);  // kernels waiting on a peer end with an error
    comm_ = nullptr;
  }

 private:
  ncclComm_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    FS_CHECK(comm_ != nullptr, "tensor-parallel group aborted: another rank failed");
    return comm_;
  }

  std::mutex mu_;
  ncclComm_t comm_;
  const int rank_, size_;
  cudaStream_t stream_ = nullptr;  // the rank backend's stream (0: the legacy default stream)
  void* scratch_ = nullptr;        // one float for barrier()
  void* symmetric_ = nullptr;      // symmetric_buffer(), of symmetric_bytes_
  size_t symmetric_bytes_ = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  ncclWindow_t window_ = nullptr;
#endif
};

// NVLink SHARP (multicast) stays off in everything flashserve starts: on shared machines a
// program using it can take the host's GPUs out of service, and the all-reduces here are small
// (latency-bound), where it gains little. Set before NCCL reads its environment.
void nvls_off() { setenv("NCCL_NVLS_ENABLE", "0", 1); }

void check_gpus(int size) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count < size)
    FS_THROW("tensor-parallel-size ", size, " needs ", size, " GPUs; ",
             err == cudaSuccess ? count : 0, " visible",
             err == cudaSuccess ? "" : std::string(" (") + cudaGetErrorString(err) + ")");
}

}  // namespace

bool nccl_available() { return true; }

std::string nccl_unique_id() {
  nvls_off();
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof id.internal);
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::string& unique_id, int world,
                                                           int first_rank, int count) {
  ncclUniqueId id;
  FS_CHECK(unique_id.size() == sizeof id.internal, "NCCL unique id of ", unique_id.size(), " bytes");
  FS_CHECK(count >= 1 && first_rank >= 0 && first_rank + count <= world, "NCCL ranks ",
           first_rank, "+", count, " of ", world);
  nvls_off();
  check_gpus(count);
  std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  std::vector<ncclComm_t> comms(size_t(count), nullptr);
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (int i = 0; i < count; ++i) {
    cuda_check(cudaSetDevice(i), "cudaSetDevice");
    nccl_check(ncclCommInitRank(&comms[size_t(i)], world, id, first_rank + i), "ncclCommInitRank");
  }
  nccl_check(ncclGroupEnd(), "ncclCommInitRank (group)");
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < count; ++i)
    out.push_back(std::make_unique<NcclCommunicator>(comms[size_t(i)], first_rank + i, world));
  return out;
}

std::vector<std::unique_ptr<Communicator>> make_nccl_group(int size) {
  FS_CHECK(size >= 1, "a group needs at least one rank, got ", size);
  nvls_off();
  check_gpus(size);
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");  // ncclCommInitAll moves it: put it back
  std::vector<ncclComm_t> comms(size_t(size), nullptr);
  std::vector<int> devices(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) devices[size_t(r)] = r;
  nccl_check(ncclCommInitAll(comms.data(), size, devices.data()), "ncclCommInitAll");
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_unique<NcclCommunicator>(comms[size_t(r)], r, size));
  return out;
}

}  // namespace flashserve

#else  // no NCCL

namespace flashserve {

bool nccl_available() { return false; }

namespace {
[[noreturn]] void no_nccl() {
  FS_THROW("tensor parallelism on GPUs needs NCCL, and this build has none (configure with "
           "CUDA and nccl.h + libnccl, see docs/TENSOR_PARALLEL.md)");
}
}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_group(int) { no_nccl(); }
std::string nccl_unique_id() { no_nccl(); }
std::vector<std::unique_ptr<Communicator>> make_nccl_group(const std::string&, int, int, int) {
  no_nccl();
}

}  // namespace flashserve

#endif
