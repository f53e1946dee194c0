// A laid-out StepPlan's arrays as one flat int32 message, and back: what node 0 of a multi-host
// group sends every other node each step (parallel/node_group.h). The forward pass reads only
// these arrays, so the other nodes need neither the chunks nor the scheduler.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/step.h"

namespace flashserve {

// [num_seqs, max_q_len, max_kv_len, max_blocks_per_seq, num_hidden_rows, then each array as
// its length followed by its values] of a plan after lay_out().
std::vector<int32_t> pack_step_arrays(const StepPlan& plan);
// The inverse (no chunks); throws flashserve::Error on a message of the wrong shape.
StepPlan unpack_step_arrays(std::span<const int32_t> msg);

}  // namespace flashserve
