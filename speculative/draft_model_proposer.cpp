// The draft model: catch up on what the target accepted, then greedy decoding, batched.
#include "speculative/draft_model_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve {

std::string draft_model_mismatch(const ModelConfig& d, const ModelConfig& t) {
  if (d.vocab_size != t.vocab_size)
    return str_cat("the draft model's vocabulary has ", d.vocab_size, " tokens, the target's ",
                   t.vocab_size);
  if (d.bos_token_id != t.bos_token_id)
    return str_cat("the draft model's BOS id is ", d.bos_token_id, ", the target's ",
                   t.bos_token_id);
  if (d.eos_token_ids != t.eos_token_ids)
    return "the draft model's EOS ids differ from the target's";
  return {};
}

DraftModelProposer::DraftModelProposer(std::unique_ptr<ModelRunner> draft,
                                       const ModelConfig& target)
    : runner_(std::move(draft)) {
  FS_CHECK(runner_ != nullptr, "DraftModelProposer needs a ModelRunner");
  const std::string why = draft_model_mismatch(runner_->config(), target);
  FS_CHECK(why.empty(), why);
  for (int b = runner_->num_kv_blocks(); b-- > 0;) free_blocks_.push_back(b);
}

void DraftModelProposer::release(uint64_t id) {
  auto it = states_.find(id);
  if (it == states_.end()) return;
  for (int32_t b : it->second.block_table) free_blocks_.push_back(b);
  states_.erase(it);
}

bool DraftModelProposer::reserve(uint64_t id, State& s, int num_tokens) {
  const int bs = runner_->block_size();
  const size_t need = size_t((num_tokens + bs - 1) / bs);
  while (s.block_table.size() < need && !free_blocks_.empty()) {
    s.block_table.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  if (s.block_table.size() >= need) return true;
  release(id);
  return false;
}

void DraftModelProposer::propose(std::span<const ProposalRequest> requests,
                                 std::vector<std::vector<int32_t>>* drafts) {
  drafts->assign(requests.size(), {});
  const int max_len = runner_->config().max_model_len;
  // 1. Catch up: each request's tokens past what this cache still holds, in one chunk; its last
  //    row's argmax is the first draft token.
  std::vector<size_t> active;  // requests drafting, in the order of plan_'s chunks
  plan_.chunks.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposalRequest& r = requests[i];
    const int len = int(r.tokens.size());
    if (len + r.max_draft > max_len) continue;
    State& s = states_[r.id];
    const size_t common = size_t(std::mismatch(s.tokens.begin(),
                                               s.tokens.begin() + s.num_computed,
                                               r.tokens.begin(), r.tokens.end())
                                     .first - s.tokens.begin());
    s.num_computed = std::min(int(common), len - 1);  // the last token runs for its logits
    s.tokens.assign(r.tokens.begin(), r.tokens.end());
    if (!reserve(r.id, s, len + r.max_draft)) continue;
    StepChunk c;
    c.tokens = s.tokens.data() + s.num_computed;
    c.num_tokens = len - s.num_computed;
    c.num_cached = s.num_computed;
    c.block_table = &s.block_table;
    c.sample_path = SamplePath::kArgmax;
    plan_.chunks.push_back(c);
    active.push_back(i);
  }
  // 2. Then one token per forward until each draft is long enough (a NaN row ends a draft).
  while (!plan_.chunks.empty()) {
    logits_.clear();
    ids_.clear();
    runner_->step(plan_, &logits_, &ids_);
    FS_CHECK(ids_.size() == active.size(), "the draft model returned ", ids_.size(),
             " tokens for ", active.size(), " sequences");
    std::vector<size_t> next;
    plan_.chunks.clear();
    for (size_t j = 0; j < active.size(); ++j) {
      const ProposalRequest& r = requests[active[j]];
      State& s = states_.at(r.id);
      std::vector<int32_t>& d = (*drafts)[active[j]];
      s.num_computed = int(s.tokens.size());
      if (ids_[j] < 0) continue;
      d.push_back(ids_[j]);
      s.tokens.push_back(ids_[j]);
      if (int(d.size()) >= r.max_draft) continue;
      StepChunk c;
      c.tokens = &s.tokens.back();
      c.num_tokens = 1;
      c.num_cached = s.num_computed;
      c.block_table = &s.block_table;
      c.sample_path = SamplePath::kArgmax;
      plan_.chunks.push_back(c);
      next.push_back(active[j]);
    }
    active.swap(next);
  }
}

}  // namespace flashserve
