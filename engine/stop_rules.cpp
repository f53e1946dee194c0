// Stop rules of a generation (see engine/stop_rules.h).
#include "engine/stop_rules.h"

#include <algorithm>

namespace flashserve {

bool fits_context(int64_t prompt_len, int64_t max_tokens, int64_t capacity) {
  // Written as a difference: prompt_len + max_tokens could overflow for a huge max_tokens.
  return prompt_len <= capacity && max_tokens <= capacity - prompt_len;
}

int generation_budget(int prompt_len, int max_tokens, int max_model_len) {
  return std::max(0, std::min(max_tokens, max_model_len - prompt_len));
}

bool needs_no_step(int budget, bool prompt_logprobs) {
  return budget_spent(0, budget) && !prompt_logprobs;
}

bool is_eos(int32_t token, std::span<const int32_t> eos_ids) {
  return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
}

FinishReason finish_after_token(int32_t token, int num_generated, int budget,
                                std::span<const int32_t> eos_ids, bool ignore_eos,
                                bool output_complete) {
  if (output_complete) return FinishReason::kStop;  // whatever ended it, even with ignore_eos
  if (!ignore_eos && is_eos(token, eos_ids)) return FinishReason::kStop;
  if (budget_spent(num_generated, budget)) return FinishReason::kLength;
  return FinishReason::kNone;
}

}  // namespace flashserve
