// MegaProgram's layout helpers: the kernel's flat queues, weight shapes and bytes per op.
#include "megakernel/instructions.h"

#include "core/error.h"

namespace flashserve {

void MegaProgram::flatten(std::vector<MegaInstr>* instrs_out,
                          std::vector<int32_t>* queue_start) const {
  instrs_out->clear();
  queue_start->assign(1, 0);
  for (const std::vector<int>& q : queues) {
    for (int i : q) instrs_out->push_back(instrs[size_t(i)]);
    queue_start->push_back(int32_t(instrs_out->size()));
  }
}

MegaWeightShape mega_weight_shape(const MegaDims& d, MegaOp op) {
  const int64_t qkv_rows = int64_t(d.num_q_heads + 2 * d.num_kv_heads) * d.head_dim;
  switch (op) {
    case MegaOp::kQkv: return {qkv_rows, d.hidden, 1};
    case MegaOp::kOProj: return {d.hidden, int64_t(d.num_q_heads) * d.head_dim, 1};
    case MegaOp::kGateUp: return {d.intermediate, d.hidden, 2};
    case MegaOp::kDown: return {d.hidden, d.intermediate, 1};
    case MegaOp::kLmHead: return {d.vocab, d.hidden, 1};
    case MegaOp::kEmbed:
    case MegaOp::kAttention: return {0, 0, 1};
  }
  FS_THROW("megakernel: unknown op ", int(op));
}

int64_t mega_weight_bytes(const MegaDims& d, const MegaInstr& in) {
  const MegaWeightShape s = mega_weight_shape(d, MegaOp(in.op));
  if (s.rows == 0) return 0;
  return int64_t(in.end - in.begin) * s.rows_per_unit * s.k * 2;
}

const char* mega_op_name(MegaOp op) {
  static const char* const kNames[kMegaNumOps] = {"embed", "qkv",  "attention", "o_proj",
                                                  "gate_up", "down", "lm_head"};
  const int i = int(op);
  return i >= 0 && i < kMegaNumOps ? kNames[i] : "?";
}

}  // namespace flashserve
