// speculative/: draft tokens for speculative decoding — the Proposer interface that the engine
// asks each step, its implementations (n-gram lookup in the request's own tokens, a test-only
// oracle) and the policy sizing each draft (docs/SPECULATIVE.md).
//
// A proposer guesses how a sequence continues; the engine verifies every guess with one target
// forward over the sequence's pending token and its draft, so a wrong guess costs compute and
// never changes the output. Proposers run on the engine thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace flashserve {

// One sequence to propose for.
struct ProposalRequest {
  uint64_t id = 0;                  // the engine's request id, stable while the request lives
  std::span<const int32_t> tokens;  // [num_prompt_tokens + generated] all the sequence's tokens
  int num_prompt_tokens = 0;
  int max_draft = 0;                // propose at most this many tokens (>= 1)
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // The method's name, as flags and metrics spell it ("ngram", "oracle").
  virtual std::string name() const = 0;
  // Fills drafts[i] (cleared first) with up to requests[i].max_draft tokens that may follow
  // requests[i].tokens; empty when it has no guess. One call per engine step for all the
  // sequences that speculate in it, so that a proposer running a model batches them. A stateful
  // proposer learns what was accepted from the tokens it is shown next.
  virtual void propose(std::span<const ProposalRequest> requests,
                       std::vector<std::vector<int32_t>>* drafts) = 0;  // [requests.size()]
  // The request finished: drop any state kept for it.
  virtual void release(uint64_t id) { (void)id; }
};

}  // namespace flashserve
