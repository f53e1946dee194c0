// The CUDA backend's graphs (backends/cuda/cuda_backend.h): the launch key of a decode step (what
// the attention path decided from host data), and stream capture and replay of CUDA graphs.
#include "backends/backend.h"

#ifdef FLASHSERVE_HAS_CUDA

#include <vector>

#include "backends/cuda/cuda_backend.h"

namespace flashserve {

// ---- CUDA graphs -------------------------------------------------------------------------
// The key packs the attention path with what it decided from host data: the generic kernel's
// shared-memory length (a windowed layer's is min(it, window), so it is keyed too), or the
// split-K plan of every window the model's layers use (splits, chunk length, kv heads per block).
bool CudaBackend::graph_launch_key(const StepArgs& b, int num_q_heads, int num_kv_heads, int head_dim,
                      std::span<const int> windows, uint64_t* key) {
  const PagedAttentionArgs a = paged_attention_args(b, num_q_heads, num_kv_heads, head_dim);
  const AttentionPath path = attention_path(b, a);
  uint64_t k = uint64_t(path);
  if (path == AttentionPath::kGeneric) {
    k |= uint64_t(generic_kv_len(b.max_kv_len, a.head_dim)) << 8;
  } else if (path == AttentionPath::kDecode) {
    // Every window's plan, in order; the list gets a small id of its own, so the key tells apart
    // exactly the steps that launch differently, however many windows a model has.
    const int full_only[] = {0};
    std::vector<int> decided;
    for (int window : windows.empty() ? std::span<const int>(full_only) : windows) {
      PagedAttentionArgs aw = a;
      aw.window = window;
      const DecodePlan& plan = decode_plan(b.host_kv_lens, aw);
      ensure_decode_workspace(aw, plan);  // never allocate while recording
      decided.insert(decided.end(), {window, plan.num_splits,
                                     plan.num_splits == 1 ? 0 : plan.chunk_len, plan.kv_heads_per_block});
    }
    const uint64_t id = launch_ids_.emplace(decided, launch_ids_.size()).first->second;
    FS_CHECK(id < (uint64_t(1) << 48), "too many distinct decode plans for the graph key");
    k |= id << 8;
  }
  *key = k;
  return true;
}

void CudaBackend::begin_capture() {
  // Thread-local mode: other threads' CUDA calls (none today) cannot invalidate the capture.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

std::shared_ptr<void> CudaBackend::end_capture() {
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(err);
  return std::shared_ptr<void>(exec, [](void* e) {
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e));
  });
}

void CudaBackend::abort_capture() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();  // an invalidated capture leaves its error in the last-error slot
}

void CudaBackend::replay(const std::shared_ptr<void>& graph) {
  CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.get()), stream_));
}

}  // namespace flashserve

#endif  // FLASHSERVE_HAS_CUDA
