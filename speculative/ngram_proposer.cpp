// Prompt lookup: the continuation of the latest earlier occurrence of the sequence's suffix.
#include "speculative/ngram_proposer.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve {

NgramProposer::NgramProposer(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  FS_CHECK(min_n >= 1 && min_n <= max_n, "n-gram sizes must satisfy 1 <= min ", min_n,
           " <= max ", max_n);
}

void NgramProposer::lookup(std::span<const int32_t> tokens, int min_n, int max_n, int max_draft,
                           std::vector<int32_t>* draft) {
  draft->clear();
  const int len = int(tokens.size());
  // Longest suffix first: a longer match predicts better. The latest occurrence first: recent
  // text is the likeliest to repeat. The occurrence must end before the suffix itself starts
  // overlapping the end (start + n < len), so at least one token follows it.
  for (int n = std::min(max_n, len - 1); n >= min_n; --n) {
    const auto suffix = tokens.subspan(size_t(len - n));
    for (int start = len - n - 1; start >= 0; --start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int from = start + n;
      const int count = std::min(max_draft, len - from);
      draft->assign(tokens.begin() + from, tokens.begin() + from + count);
      return;
    }
  }
}

void NgramProposer::propose(std::span<const ProposalRequest> requests,
                            std::vector<std::vector<int32_t>>* drafts) {
  drafts->resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    lookup(requests[i].tokens, min_n_, max_n_, requests[i].max_draft, &(*drafts)[i]);
}

}  // namespace flashserve
