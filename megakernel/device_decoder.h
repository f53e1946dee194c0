// MegaDecoder: runs decode steps on the CUDA backend as one megakernel launch each. It lowers a
// program per batch size on first use (megakernel/lower.h), keeps it, the counters and the
// activation buffers on the device, and launches kernels/cuda/megakernel.cu on the backend's
// stream. The model binds its weights and KV cache once (MegaLayerPtrs) and passes each step's
// device arrays.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "backends/backend.h"
#include "megakernel/lower.h"

namespace flashserve {

// A decode step's device arrays (StepArgs' views) and where its logits go.
struct MegaStepArrays {
  const int32_t* tokens = nullptr;       // [batch]
  const int32_t* positions = nullptr;    // [batch]
  const int32_t* slots = nullptr;        // [batch]
  const int32_t* kv_lens = nullptr;      // [batch]
  const int32_t* block_table = nullptr;  // [batch, max_blocks_per_seq]
  int max_blocks_per_seq = 0, block_size = 0;
  float* logits = nullptr;               // [batch, vocab_size] f32
};

class MegaDecoder {
 public:
  // `c` must be supported (megakernel_unsupported(c, 1) empty) and `backend` the CUDA backend
  // with bf16 compute; throws flashserve::Error otherwise (or when built without CUDA).
  MegaDecoder(Backend& backend, const ModelConfig& c);
  // The weights and caches (device pointers, bf16) for every later step; uploaded once.
  void bind(const std::vector<MegaLayerPtrs>& layers,
            const uint16_t* embed,       // [vocab_size, hidden_size]
            const uint16_t* final_norm,  // [hidden_size]
            const uint16_t* lm_head,     // [vocab_size, hidden_size]
            const float* inv_freq);      // [head_dim / 2]
  bool bound() const { return bound_; }
  // One decode step of `batch` (1..kMegaMaxBatch) sequences, queued on the backend's stream.
  void run(int batch, const MegaStepArrays& step);
  // The program a step of `batch` sequences runs (lowered on first use).
  const MegaProgram& lowered(int batch) { return program(batch).program; }
  // Null, or a device buffer [instructions of the batch's program, kMegaTraceFields] that every
  // later run fills (MegaKernelArgs::trace; bench_megakernel_timeline).
  void set_trace(int64_t* trace) { trace_ = trace; }

 private:
  struct DeviceProgram {
    MegaProgram program;
    Buffer instrs, queue_start;
  };
  const DeviceProgram& program(int batch);

  Backend& backend_;
  ModelConfig config_;
  int num_sms_ = 0;
  bool bound_ = false;
  std::map<int, DeviceProgram> programs_;
  Buffer layers_, counters_, x_, qkv_, partial_, attn_, act_;
  int64_t counters_size_ = 0;
  int64_t* trace_ = nullptr;
  MegaKernelArgs base_{};  // weights and buffers; each run adds its program and step
};

}  // namespace flashserve
