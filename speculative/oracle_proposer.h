// OracleProposer (test-only and benchmarks): knows each prompt's reference continuation (the
// target's own output, from a run without speculation) and proposes it, each draft token right
// with probability alpha and otherwise replaced by another token. It measures what verification
// gains at a known acceptance, and alpha 0 / 1 give the always-wrong and always-right proposers
// of the exactness tests. Never offered by the server.
#pragma once

#include <map>

#include "speculative/proposer.h"

namespace flashserve {

class OracleProposer : public Proposer {
 public:
  // alpha in [0, 1]; `seed` fixes which draft tokens are made wrong; wrong tokens stay inside a
  // vocabulary of `vocab_size`.
  OracleProposer(double alpha, uint64_t seed, int vocab_size);
  std::string name() const override { return "oracle"; }
  // The output that follows `prompt` (prompts are told apart by their tokens).
  void add(std::vector<int32_t> prompt, std::vector<int32_t> continuation);
  // A benchmark's next acceptance rate; call only while the engine is idle.
  void set_alpha(double alpha);
  void propose(std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override;

 private:
  double alpha_;
  const uint64_t seed_;
  const int vocab_size_;
  std::map<std::vector<int32_t>, std::vector<int32_t>> reference_;
};

}  // namespace flashserve
