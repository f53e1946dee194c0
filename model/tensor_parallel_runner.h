// The tensor-parallel ModelRunner (docs/TENSOR_PARALLEL.md): one engine process, one worker
// thread per rank (parallel/rank_workers.h), each rank with its own backend (GPU r: its stream
// and CUDA graphs; or a CPU backend), its slice of the weights (LlamaModel with a TensorShard)
// and of the KV cache (its KV heads of every block: block ids mean the same on every rank). The
// scheduler and the sampler stay with the caller: every rank runs each step, rank 0's logits
// (whole, after the gather) come back, and rank 0's backend draws the tokens drawn on a device.
#pragma once

#include <memory>

#include "model/model_runner.h"

namespace flashserve {

// options.tensor_parallel_size ranks, also 1 (the group machinery with one rank: tests and the
// NCCL path on one GPU). Checks that the size divides the model before loading anything.
std::unique_ptr<ModelRunner> make_tensor_parallel_runner(const LoadedModel& model,
                                                         const ModelRunnerOptions& options);

// A node other than 0 of options.node_group: loads this node's ranks, then runs each step's plan
// node 0 sends until node 0 stops the group (returns) or the group fails (throws, naming why).
void run_tensor_parallel_worker(const LoadedModel& model, const ModelRunnerOptions& options);

}  // namespace flashserve
