// NgramProposer (--speculative ngram): prompt lookup. The sequence's last n tokens (n from max_n
// down to min_n) are looked up earlier in its own tokens (prompt and output); the tokens that
// followed the most recent earlier occurrence are the draft. No model, no state: it pays where
// the output repeats its context (edits, code, retrieved text, structured output).
#pragma once

#include "speculative/proposer.h"

namespace flashserve {

class NgramProposer : public Proposer {
 public:
  // 1 <= min_n <= max_n; throws flashserve::Error otherwise.
  NgramProposer(int min_n, int max_n);
  std::string name() const override { return "ngram"; }
  void propose(std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override;

  // One sequence's draft (exposed for tests).
  static void lookup(std::span<const int32_t> tokens, int min_n, int max_n, int max_draft,
                     std::vector<int32_t>* draft);

 private:
  const int min_n_, max_n_;
};

}  // namespace flashserve
