// A model step's outputs, per scheduled chunk: prompt logprobs gathered until the prompt is
// done, an embedding request's hidden state once its prompt is, the next token drawn (from the
// host's logits row or the device sampler's id, under the chunk's grammar mask; a verified draft
// gives a token per agreeing position, docs/SPECULATIVE.md), the output constraint advanced by
// each, and the stop rules (engine/stop_rules.h) applied to each; what finishes is finished once
// the step's chunks are all read.
#include <limits>
#include <span>

#include "core/error.h"
#include "engine/engine_impl.h"
#include "engine/stop_rules.h"

namespace flashserve {

SampleRequest sample_request(const Sequence& seq, const SamplingParams& params) {
  SampleRequest r;
  r.params = &params;
  r.prompt = std::span<const int32_t>(seq.tokens.data(), size_t(seq.num_prompt_tokens));
  r.generated = std::span<const int32_t>(seq.tokens.data() + seq.num_prompt_tokens,
                                         size_t(seq.num_generated()));
  r.step = static_cast<uint64_t>(seq.num_generated());
  return r;
}

void EngineImpl::process_outputs(const SchedulerOutput& out, const StepPlan& plan,
                                 const std::vector<float>& logits,
                                 const std::vector<int32_t>& sampled_ids,
                                 const std::vector<float>& hidden) {
  const size_t vocab = static_cast<size_t>(vocab_size_);
  const size_t width = static_cast<size_t>(runner_->config().hidden_size);
  size_t row = 0, sampled_row = 0, hidden_row = 0;
  std::vector<std::pair<uint64_t, FinishReason>> done;
  std::vector<std::pair<uint64_t, std::string>> errors;
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    Sequence* seq = c.seq;
    ActiveRequest& a = active_.at(seq->id);
    const bool sampled = plan.chunks[i].sample_path != SamplePath::kHost;
    const int32_t sampled_id = sampled ? sampled_ids.at(sampled_row++) : -1;
    const int num_rows = sampled ? 0
                         : c.logits == LogitsWanted::kAll ? c.num_tokens
                         : c.logits == LogitsWanted::kLast ? 1 : 0;
    const float* rows = logits.data() + row * vocab;  // [num_rows, vocab_size]
    row += num_rows;
    const int start = seq->num_computed - c.num_tokens;  // position of the chunk's first token
    if (c.logits == LogitsWanted::kAll && seq->need_prompt_logprobs) {
      // Row j predicts the token at start + j + 1.
      for (int j = 0; j < c.num_tokens && start + j + 1 < seq->num_prompt_tokens; ++j) {
        a.prompt_logprobs.push_back(token_logprobs({rows + j * vocab, vocab},
                                                   seq->tokens[start + j + 1], a.sampling.logprobs));
      }
      if (seq->num_computed >= seq->num_prompt_tokens) {
        StreamEvent e;
        e.kind = StreamEvent::Kind::kPromptLogprobs;
        SampledToken first;  // the first prompt token has nothing before it
        first.token = seq->tokens[0];
        first.logprob = std::numeric_limits<float>::quiet_NaN();
        e.prompt_logprobs.push_back(first);
        for (SampledToken& t : a.prompt_logprobs) e.prompt_logprobs.push_back(std::move(t));
        a.prompt_logprobs.clear();
        seq->need_prompt_logprobs = false;
        events_.emplace_back(a.stream, std::move(e));
      }
    }
    if (!a.prompt_counted && seq->num_computed >= seq->num_prompt_tokens) {
      a.prompt_counted = true;
      a.num_cached_tokens = seq->num_cached_prompt_tokens;
      prompt_tokens_ += seq->num_prompt_tokens;
    }
    if (c.logits == LogitsWanted::kHidden) {  // an embedding request's whole prompt is done
      FS_CHECK((hidden_row + 1) * width <= hidden.size(), "the model returned ",
               hidden.size() / width, " hidden states, the batch asked for more");
      StreamEvent e;
      e.kind = StreamEvent::Kind::kEmbedding;
      e.embedding.assign(hidden.begin() + ptrdiff_t(hidden_row * width),
                         hidden.begin() + ptrdiff_t((hidden_row + 1) * width));
      ++hidden_row;
      events_.emplace_back(a.stream, std::move(e));
      done.emplace_back(seq->id, FinishReason::kStop);
      continue;
    }
    if ((num_rows == 0 && !sampled) || seq->num_computed < seq->num_tokens())
      continue;  // mid-prompt chunk
    if (budget_spent(seq->num_generated(), seq->max_tokens)) {  // 0 tokens, prompt logprobs
      done.emplace_back(seq->id, FinishReason::kLength);
      continue;
    }
    if (!chunk_mask_error_[i].empty()) {
      if (c.num_draft > 0) scheduler_.accept_draft(seq, 0);
      errors.emplace_back(seq->id, chunk_mask_error_[i]);
      continue;
    }
    // A plain decode draws one token from the last row. A verifying chunk draws at each of its
    // rows in turn — row j follows the pending token and draft tokens 0 .. j-1 — exactly as
    // decoding would (same history, same seeded step), and goes on while the token drawn is
    // the draft's; its last row gives a token after the whole draft.
    const int first_row = c.num_draft > 0 ? 0 : num_rows - 1;
    int accepted = 0;
    for (int j = 0; j <= c.num_draft; ++j) {
      SampledToken tok;
      try {
        const uint32_t* mask = j == 0 ? (chunk_mask_[i] >= 0 ? masks_.data() + chunk_mask_[i]
                                                             : nullptr)
                                      : next_draft_mask(a);
        if (sampled) {
          FS_CHECK(sampled_id >= 0, "NaN logit reached the sampler");
          tok.token = sampled_id;
          tok.logprob = std::numeric_limits<float>::quiet_NaN();  // none asked for
        } else {
          const float* row = rows + (first_row + j) * vocab;
          SampleRequest q = sample_request(*seq, a.sampling);
          q.allowed = mask;
          tok = sample_token({row, vocab}, q);
        }
        FS_CHECK(tok.token >= 0 && tok.token < vocab_size_, "sampled token ", tok.token,
                 " outside vocab of ", vocab_size_);
        FS_CHECK(!mask || token_allowed(mask, tok.token), "sampled token ", tok.token,
                 " that the output constraint forbids");
        if (a.constraint) a.constraint->accept(tok.token);
      } catch (const std::exception& e) {  // this request's parameters or logits: fail it alone
        errors.emplace_back(seq->id, e.what());
        break;
      }
      seq->tokens.push_back(tok.token);
      ++generation_tokens_;
      const auto& eos = runner_->config().eos_token_ids;
      const FinishReason why =
          finish_after_token(tok.token, seq->num_generated(), seq->max_tokens, eos, a.ignore_eos,
                             a.constraint && a.constraint->complete());
      StreamEvent e;
      e.kind = StreamEvent::Kind::kToken;
      const bool agrees = j < c.num_draft && tok.token == seq->verify_tokens[size_t(j) + 1];
      e.token = std::move(tok);
      events_.emplace_back(a.stream, std::move(e));
      if (why != FinishReason::kNone) {
        done.emplace_back(seq->id, why);
        break;
      }
      if (!agrees) break;
      ++accepted;
    }
    if (c.num_draft > 0) {
      scheduler_.accept_draft(seq, accepted);
      a.draft_tokens += uint64_t(c.num_draft);
      a.accepted_tokens += uint64_t(accepted);
      draft_tokens_ += uint64_t(c.num_draft);
      accepted_tokens_ += uint64_t(accepted);
      ++verifications_;
    }
  }
  FS_CHECK(row * vocab == logits.size(), "the model returned ", logits.size() / vocab,
           " logits rows, the batch asked for ", row);
  FS_CHECK(sampled_row == sampled_ids.size(), "the model returned ", sampled_ids.size(),
           " sampled ids, the batch asked for ", sampled_row);
  FS_CHECK(hidden_row * width == hidden.size(), "the model returned ", hidden.size() / width,
           " hidden states, the batch asked for ", hidden_row);
  for (auto& [id, reason] : done) finish(id, reason);
  for (auto& [id, why] : errors) finish(id, FinishReason::kError, why);
}

}  // namespace flashserve
