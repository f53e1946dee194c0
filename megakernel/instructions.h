// megakernel/: lowers a decode step into an instruction stream and runs it as one persistent
// kernel (docs/MEGAKERNEL.md).
//
// The host form of a lowered step: every instruction once, in a topological order, and each
// SM's queue (indices into that order). The instruction itself (MegaInstr, MegaOp, MegaBuf) is
// kernels/megakernel.h's, shared with the kernel.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/megakernel.h"

namespace flashserve {

struct MegaProgram {
  MegaDims dims;
  int num_sms = 0;
  int num_counters = 0;  // ids 0..num_counters-1 (the kernel's "done" counter comes after)
  std::vector<MegaInstr> instrs;         // topological order: waits only on earlier bumps
  std::vector<std::vector<int>> queues;  // [num_sms] indices into instrs, run in this order

  // The queues back to back (the kernel's layout): instructions and [num_sms + 1] starts.
  void flatten(std::vector<MegaInstr>* instrs_out, std::vector<int32_t>* queue_start) const;
};

// Rows and row length of the weight an op streams (kGateUp: rows are gate/up pairs, each pair
// two rows of `k`); 0 rows for kEmbed and kAttention.
struct MegaWeightShape {
  int64_t rows = 0, k = 0, rows_per_unit = 1;
};
MegaWeightShape mega_weight_shape(const MegaDims& d, MegaOp op);
// Bytes of bf16 weight instruction `in` streams.
int64_t mega_weight_bytes(const MegaDims& d, const MegaInstr& in);
const char* mega_op_name(MegaOp op);

}  // namespace flashserve
