// The GPU sampler's host packing (sampling/sample_pack.h): the kernel's per-token edit step,
// replayed on the host, equals apply_token_mask() + apply_penalties() bit for bit; rows, scales
// and validation.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "sampling/sample_pack.h"

namespace flashserve {
namespace {

TEST(SamplePack, EditsEqualApplyPenalties) {
  std::mt19937 rng(11);
  const int vocab = 300;
  for (int trial = 0; trial < 200; ++trial) {
    SamplingParams p;
    p.repetition_penalty = trial % 3 ? 1.f + float(rng() % 10) / 10.f : 1.f;
    p.presence_penalty = trial % 5 ? float(int(rng() % 7) - 3) / 4.f : 0.f;
    p.frequency_penalty = trial % 4 ? float(int(rng() % 9) - 4) / 3.f : 0.f;
    for (int i = int(rng() % 6); i > 0; --i)  // repeated tokens keep their order
      p.logit_bias.emplace_back(int32_t(rng() % 10), float(int(rng() % 200) - 100) / 7.f);
    std::vector<int32_t> prompt, generated;
    for (int i = int(rng() % 50); i > 0; --i) prompt.push_back(int32_t(rng() % vocab));
    for (int i = int(rng() % 50); i > 0; --i) generated.push_back(int32_t(rng() % 40));
    std::vector<float> logits(vocab);
    std::normal_distribution<float> n(0.f, 3.f);
    for (float& l : logits) l = n(rng);

    std::vector<uint32_t> mask(mask_words(vocab));  // every other trial: a grammar mask
    for (uint32_t& w : mask) w = uint32_t(rng());
    const uint32_t* allowed = trial % 2 ? mask.data() : nullptr;

    std::vector<float> want = logits, got = logits;
    apply_token_mask(want, allowed);
    apply_penalties(want, prompt, generated, p);
    const SampleRequest req{&p, prompt, generated, 0, allowed};
    const std::vector<int64_t> rows = {0};
    const SamplePack pack = pack_samples(rows, std::span(&req, 1), vocab);
    apply_packed_edits(got, pack, 0);
    ASSERT_EQ(got, want) << "trial " << trial;
    // Every edit is a distinct token (threads apply them in parallel).
    std::vector<int> uses(vocab, 0);
    for (int32_t e = pack.rows[0].edits_begin; e < pack.rows[0].edits_end; ++e)
      EXPECT_EQ(uses[size_t(pack.edits[size_t(e)].token)]++, 0);
  }
}

TEST(SamplePack, RowsScalesAndRanges) {
  SamplingParams a, b;
  a.temperature = 0.5f;
  a.top_k = 7;
  a.seed = 42;
  b.temperature = 0.f;
  b.logit_bias = {{3, 1.f}};
  b.frequency_penalty = 0.5f;
  const std::vector<int32_t> gen = {3, 3, 4};
  const SampleRequest reqs[] = {{&a, {}, {}, 5}, {&b, {}, gen, 9}};
  const std::vector<int64_t> rows = {4, 1};
  const SamplePack pack = pack_samples(rows, reqs, 32000);
  ASSERT_EQ(pack.rows.size(), 2u);
  EXPECT_EQ(pack.rows[0].logits_row, 4);
  EXPECT_EQ(pack.rows[0].step, 5u);
  EXPECT_EQ(pack.rows[0].seed, 42u);
  EXPECT_EQ(pack.rows[0].inv_temperature, 2.0);
  EXPECT_EQ(pack.rows[0].mass_scale, std::ldexp(1.0, 62 - 15));  // 32000 <= 2^15
  EXPECT_EQ(pack.rows[0].edits_end - pack.rows[0].edits_begin, 0);
  EXPECT_EQ(pack.rows[1].inv_temperature, 0.0);
  ASSERT_EQ(pack.rows[1].edits_end - pack.rows[1].edits_begin, 2);  // tokens 3 and 4
  const TokenEdit& t3 = pack.edits[size_t(pack.rows[1].edits_begin)];
  EXPECT_EQ(t3.token, 3);
  EXPECT_EQ(t3.count, 2);
  EXPECT_EQ(t3.bias_end - t3.bias_begin, 1);
}

TEST(SamplePack, RejectsWhatTheHostSamplerRejects) {
  SamplingParams p;
  const std::vector<int64_t> rows = {0};
  auto pack = [&](std::vector<int32_t> generated) {
    const SampleRequest r{&p, {}, generated, 0};
    return pack_samples(rows, std::span(&r, 1), 100);
  };
  p.top_p = 1.5f;
  EXPECT_THROW(pack({}), Error);
  p.top_p = 1.f;
  p.logit_bias = {{100, 1.f}};
  EXPECT_THROW(pack({}), Error);
  p.logit_bias.clear();
  p.presence_penalty = 1.f;
  EXPECT_THROW(pack({7, 100}), Error);  // a history id outside the vocabulary
  EXPECT_NO_THROW(pack({7, 99}));
  const SampleRequest none{};
  EXPECT_THROW(pack_samples(rows, std::span(&none, 1), 100), Error);
}

}  // namespace
}  // namespace flashserve
