// DraftModelProposer (--speculative draft --draft-model DIR): a smaller model sharing the
// target's vocabulary proposes by greedy decoding, on its own ModelRunner and paged KV cache in
// the same process. Per request it keeps the tokens whose K/V its cache holds. Each step it rolls
// back to the longest prefix those share with the request's tokens (what the target accepted),
// computes the rest in one chunk, which gives the first draft token, then decodes one token a
// step until the draft is long enough — every request of the step batched in each forward.
#pragma once

#include <memory>
#include <unordered_map>

#include "model/model_runner.h"
#include "speculative/proposer.h"

namespace flashserve {

// Why `draft` cannot propose for `target` ("" when it can): a different vocabulary size,
// BOS or EOS ids — the error names the difference.
std::string draft_model_mismatch(const ModelConfig& draft, const ModelConfig& target);

class DraftModelProposer : public Proposer {
 public:
  // Throws flashserve::Error (draft_model_mismatch's text) when the models do not match.
  DraftModelProposer(std::unique_ptr<ModelRunner> draft, const ModelConfig& target);
  std::string name() const override { return "draft"; }
  void propose(std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override;
  void release(uint64_t id) override;

 private:
  struct State {
    std::vector<int32_t> tokens;       // the request's tokens, then the draft proposed last
    std::vector<int32_t> block_table;  // this runner's blocks covering them
    int num_computed = 0;              // tokens[0 .. num_computed - 1] have K/V here
  };
  // Grows s's table to hold `num_tokens` positions; false (and s released) when blocks run out.
  bool reserve(uint64_t id, State& s, int num_tokens);

  std::unique_ptr<ModelRunner> runner_;
  std::vector<int32_t> free_blocks_;
  std::unordered_map<uint64_t, State> states_;
  StepPlan plan_;
  std::vector<float> logits_;
  std::vector<int32_t> ids_;
};

}  // namespace flashserve
