// The rules that end a generation, each written once (docs/API_CONTRACT.md, "Stop conditions"):
// the context rule (prompt + max_tokens fits), the token budget (max_tokens capped by the
// context), the zero-token shortcut, the end-of-sequence test and the order in which they apply
// after each generated token. The API edge, the engine thread and flashserve-generate use these.
#pragma once

#include <cstdint>
#include <span>

#include "engine/engine.h"

namespace flashserve {

// The context rule: a prompt of `prompt_len` tokens and `max_tokens` more fit a sequence of at
// most `capacity` tokens (the model's max_model_len, or the KV cache's size in tokens). 64-bit
// with no overflow, so a request's max_tokens of any size is judged as given.
bool fits_context(int64_t prompt_len, int64_t max_tokens, int64_t capacity);

// Tokens a request may generate: max_tokens (>= 0), capped so that prompt + generated never
// exceed the context of max_model_len tokens.
int generation_budget(int prompt_len, int max_tokens, int max_model_len);

// The zero-token shortcut: a request with nothing to generate and no prompt logprobs to report
// needs no model step at all; it finishes at once with kLength.
bool needs_no_step(int budget, bool prompt_logprobs);

// True once `num_generated` tokens have used the whole budget.
inline bool budget_spent(int num_generated, int budget) { return num_generated >= budget; }

// True when `token` is one of the model's end-of-sequence ids (ModelConfig::eos_token_ids).
bool is_eos(int32_t token, std::span<const int32_t> eos_ids);

// Why a request finishes right after generating `token`, its `num_generated`-th token (a
// constrained output that is complete (engine/constrained_output.h) or EOS, unless ignore_eos,
// is a kStop; reaching the budget is a kLength), or kNone to go on.
FinishReason finish_after_token(int32_t token, int num_generated, int budget,
                                std::span<const int32_t> eos_ids, bool ignore_eos,
                                bool output_complete = false);

}  // namespace flashserve
