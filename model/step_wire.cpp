// pack / unpack: the scalars, then the arrays in StepPlan's order, each after its length.
#include "model/step_wire.h"

#include "core/error.h"

namespace flashserve {
namespace {

constexpr int kScalars = 5;

template <class Plan, class Fn>
void each_array(Plan& p, Fn fn) {
  fn(p.tokens), fn(p.positions), fn(p.slot_mapping), fn(p.cu_q_lens), fn(p.kv_lens),
      fn(p.block_table), fn(p.logit_rows), fn(p.row_chunk);
}

}  // namespace

std::vector<int32_t> pack_step_arrays(const StepPlan& p) {
  std::vector<int32_t> out = {p.num_seqs, p.max_q_len, p.max_kv_len, p.max_blocks_per_seq,
                              p.num_hidden_rows};
  each_array(p, [&](const std::vector<int32_t>& a) {
    out.push_back(int32_t(a.size()));
    out.insert(out.end(), a.begin(), a.end());
  });
  return out;
}

StepPlan unpack_step_arrays(std::span<const int32_t> msg) {
  FS_CHECK(msg.size() >= size_t(kScalars), "step message of ", msg.size(), " values");
  StepPlan p;
  p.num_seqs = msg[0], p.max_q_len = msg[1], p.max_kv_len = msg[2];
  p.max_blocks_per_seq = msg[3], p.num_hidden_rows = msg[4];
  size_t at = kScalars;
  each_array(p, [&](std::vector<int32_t>& a) {
    FS_CHECK(at < msg.size() && msg[at] >= 0 && size_t(msg[at]) <= msg.size() - at - 1,
             "step message truncated at value ", at);
    const size_t n = size_t(msg[at++]);
    a.assign(msg.begin() + ptrdiff_t(at), msg.begin() + ptrdiff_t(at + n));
    at += n;
  });
  FS_CHECK(at == msg.size(), "step message: ", msg.size() - at, " values left over");
  return p;
}

}  // namespace flashserve
