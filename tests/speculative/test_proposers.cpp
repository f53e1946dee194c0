// The n-gram proposer finds the latest occurrence of the longest suffix and proposes what
// followed it; the oracle proposes the reference continuation, right at the rate asked for.
#include <gtest/gtest.h>

#include "core/error.h"
#include "speculative/ngram_proposer.h"
#include "speculative/oracle_proposer.h"

namespace flashserve {
namespace {

std::vector<int32_t> lookup(std::vector<int32_t> tokens, int min_n, int max_n, int k) {
  std::vector<int32_t> d;
  NgramProposer::lookup(tokens, min_n, max_n, k, &d);
  return d;
}

TEST(NgramProposer, ContinuesTheLatestLongestMatch) {
  // Suffix "1 2" occurs twice: after the latest one came 9.
  EXPECT_EQ(lookup({1, 2, 3, 4, 1, 2, 9, 5, 1, 2}, 1, 3, 3), (std::vector<int32_t>{9, 5, 1}));
  // "7 1 2" (n = 3) beats the more recent "1 2": the longer match decides.
  EXPECT_EQ(lookup({7, 1, 2, 3, 8, 1, 2, 6, 7, 1, 2}, 1, 3, 2), (std::vector<int32_t>{3, 8}));
  // At most k tokens, and no more than follow the match.
  EXPECT_EQ(lookup({5, 6, 5}, 1, 2, 4), (std::vector<int32_t>{6, 5}));
  // The match may overlap the suffix (a repeated token proposes more of itself).
  EXPECT_EQ(lookup({4, 4, 4}, 1, 2, 3), (std::vector<int32_t>{4}));
}

TEST(NgramProposer, NothingWithoutAMatch) {
  EXPECT_TRUE(lookup({1, 2, 3, 4}, 1, 3, 4).empty());
  EXPECT_TRUE(lookup({1}, 1, 3, 4).empty());
  // Only 1-grams repeat, and 2 is the shortest size asked for.
  EXPECT_TRUE(lookup({1, 2, 3, 1}, 2, 3, 4).empty());
}

TEST(NgramProposer, BatchAndBadSizes) {
  NgramProposer p(1, 2);
  const std::vector<int32_t> a = {1, 2, 1}, b = {3, 4};
  std::vector<ProposalRequest> reqs = {{1, a, 1, 2}, {2, b, 1, 2}};
  std::vector<std::vector<int32_t>> drafts = {{99}};
  p.propose(reqs, &drafts);
  ASSERT_EQ(drafts.size(), 2u);
  EXPECT_EQ(drafts[0], (std::vector<int32_t>{2, 1}));
  EXPECT_TRUE(drafts[1].empty());
  EXPECT_THROW(NgramProposer(0, 2), Error);
  EXPECT_THROW(NgramProposer(3, 2), Error);
}

TEST(OracleProposer, RightAtTheRateAskedFor) {
  const std::vector<int32_t> prompt = {1, 5};
  std::vector<int32_t> ref;
  for (int i = 0; i < 4000; ++i) ref.push_back(i % 97);
  for (double alpha : {0.0, 0.3, 0.8, 1.0}) {
    OracleProposer o(alpha, 7, 100);
    o.add(prompt, ref);
    int right = 0, total = 0;
    for (size_t at = 0; at + 4 <= ref.size(); at += 4) {
      std::vector<int32_t> tokens = prompt;
      tokens.insert(tokens.end(), ref.begin(), ref.begin() + ptrdiff_t(at));
      std::vector<ProposalRequest> reqs = {{1, tokens, 2, 4}};
      std::vector<std::vector<int32_t>> d;
      o.propose(reqs, &d);
      ASSERT_EQ(d[0].size(), 4u);
      for (size_t j = 0; j < 4; ++j) {
        EXPECT_GE(d[0][j], 0);
        EXPECT_LT(d[0][j], 100);
        right += d[0][j] == ref[at + j] ? 1 : 0;
        ++total;
      }
    }
    EXPECT_NEAR(double(right) / total, alpha, 0.03) << alpha;
  }
  // An unknown prompt, and the end of the reference: nothing more to propose.
  OracleProposer o(1.0, 7, 100);
  o.add(prompt, {3, 4});
  std::vector<std::vector<int32_t>> d;
  const std::vector<int32_t> other = {2, 2}, near_end = {1, 5, 3};
  o.propose(std::vector<ProposalRequest>{{1, other, 2, 4}, {2, near_end, 2, 4}}, &d);
  EXPECT_TRUE(d[0].empty());
  EXPECT_EQ(d[1], (std::vector<int32_t>{4}));
  EXPECT_THROW(OracleProposer(1.5, 0, 10), Error);
}

}  // namespace
}  // namespace flashserve
