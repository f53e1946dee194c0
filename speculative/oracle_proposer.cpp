// The oracle: the reference continuation, each token kept with probability alpha.
#include "speculative/oracle_proposer.h"

#include "core/error.h"
#include "core/philox.h"

namespace flashserve {

OracleProposer::OracleProposer(double alpha, uint64_t seed, int vocab_size)
    : seed_(seed), vocab_size_(vocab_size) {
  FS_CHECK(vocab_size >= 2, "oracle vocabulary of ", vocab_size, " tokens");
  set_alpha(alpha);
}

void OracleProposer::set_alpha(double alpha) {
  FS_CHECK(alpha >= 0.0 && alpha <= 1.0, "oracle acceptance ", alpha, " outside [0, 1]");
  alpha_ = alpha;
}

void OracleProposer::add(std::vector<int32_t> prompt, std::vector<int32_t> continuation) {
  reference_[std::move(prompt)] = std::move(continuation);
}

void OracleProposer::propose(std::span<const ProposalRequest> requests,
                             std::vector<std::vector<int32_t>>* drafts) {
  drafts->resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposalRequest& r = requests[i];
    std::vector<int32_t>& d = (*drafts)[i];
    d.clear();
    const std::vector<int32_t> prompt(r.tokens.begin(), r.tokens.begin() + r.num_prompt_tokens);
    auto it = reference_.find(prompt);
    if (it == reference_.end()) continue;
    const std::vector<int32_t>& ref = it->second;
    // The reference's token at this output position, right or replaced by its neighbour: a
    // function of (seed, position) alone, so a rerun proposes the same.
    for (size_t pos = r.tokens.size() - size_t(r.num_prompt_tokens);
         pos < ref.size() && int(d.size()) < r.max_draft; ++pos) {
      const Philox4x32 u = philox_draw(seed_, pos);
      const bool right = philox_uniform53(u.v[0], u.v[1]) < alpha_;
      d.push_back(right ? ref[pos] : (ref[pos] + 1) % vocab_size_);
    }
  }
}

}  // namespace flashserve
