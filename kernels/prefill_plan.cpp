// prefill_fresh_kv_pays: counts the tokens of the step's fresh sequences against all of its tokens.
#include "kernels/prefill_plan.h"

namespace flashserve {

bool prefill_fresh_kv_pays(const int32_t* cu_q_lens, const int32_t* kv_lens, int num_seqs,
                           int min_fresh_len) {
  if (num_seqs <= 0) return false;
  int64_t fresh = 0;
  for (int i = 0; i < num_seqs; ++i) {
    const int32_t q_len = cu_q_lens[i + 1] - cu_q_lens[i];
    if (q_len == kv_lens[i] && q_len >= min_fresh_len) fresh += q_len;
  }
  const int64_t total = cu_q_lens[num_seqs] - cu_q_lens[0];
  return fresh > 0 && 2 * fresh >= total;
}

}  // namespace flashserve
