// Paging, chunking and batching do not change the numbers: chunked prefill equals whole prefill,
// block sizes 1, 16 and 32 give the same logits, and a sequence run alone equals the same
// sequence inside a batch of 8 ragged ones (mixing prefill chunks and decodes), with block ids
// shuffled so sequences interleave in the cache.
//
// Expected difference: exactly zero. Every output element of every CPU op is computed by the
// same loop in the same order whatever the batch, chunk, block size or thread split; attention
// visits keys in position order regardless of where their blocks sit. So kTol is 0 (bitwise
// equality, measured): a change that makes any reduction depend on the batch fails here and
// has to explain itself.
#include <gtest/gtest.h>

#include "core/error.h"
#include "model/model_runner.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

constexpr double kTol = 0.0;

class PagedInvariance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(fs::temp_directory_path() / ("fs_paged_" + std::to_string(getpid())));
    fs::create_directories(*dir_);
    ModelConfig c = small_config(256, 4, 2, 64, false);  // GQA, group size 2
    write_random_hf_model(*dir_, c, 99, DType::kF32, 1, 0.08f);
    model_ = load_model(*dir_).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::unique_ptr<ModelRunner> runner(int block_size, int threads = 2) {
    ModelRunnerOptions o;
    o.block_size = block_size;
    o.threads = threads;
    o.kv_cache_tokens = 4096;
    return ModelRunner::create(*model_, o);
  }
  static LoadedModel* model_;
  static std::string* dir_;
};
LoadedModel* PagedInvariance::model_ = nullptr;
std::string* PagedInvariance::dir_ = nullptr;

// Runs one sequence through `runner` in chunks of the given sizes (kAll), then `decodes` steps
// feeding fixed tokens; returns every logit row in order.
std::vector<float> run_chunks(ModelRunner& runner, const std::vector<int32_t>& tokens,
                              const std::vector<int>& chunks, uint32_t pool_seed) {
  BlockPool pool(runner.num_kv_blocks(), pool_seed);
  TestSeq seq;
  seq.tokens = tokens;
  std::vector<float> logits;
  for (int n : chunks) {
    StepPlan b;
    b.chunks.push_back(seq.chunk(n, runner.block_size(), pool, LogitsWanted::kAll));
    runner.step(b, &logits);
  }
  EXPECT_EQ(seq.num_cached, int(tokens.size()));
  return logits;
}

TEST_F(PagedInvariance, ChunkedPrefillEqualsWholePrefill) {
  const auto tokens = random_tokens(70, model_->config().vocab_size, 1);
  auto r = runner(16);
  const auto whole = run_chunks(*r, tokens, {70}, 5);
  for (std::vector<int> chunks : {std::vector<int>{1, 15, 16, 38}, {33, 1, 1, 1, 34}, {7, 63}}) {
    auto r2 = runner(16);
    const auto got = run_chunks(*r2, tokens, chunks, 6);
    EXPECT_LE(max_rel_diff(got, whole), kTol);
  }
}

TEST_F(PagedInvariance, BlockSizeDoesNotMatter) {
  const auto tokens = random_tokens(45, model_->config().vocab_size, 2);
  // Prefill 40 then decode 5 one at a time: both paths see the block size.
  const std::vector<int> chunks = {40, 1, 1, 1, 1, 1};
  auto r16 = runner(16);
  const auto ref = run_chunks(*r16, tokens, chunks, 8);
  for (int bs : {1, 32}) {
    auto r = runner(bs);
    EXPECT_LE(max_rel_diff(run_chunks(*r, tokens, chunks, 9), ref), kTol) << "block size " << bs;
  }
}

TEST_F(PagedInvariance, AloneEqualsInRaggedBatchOfEight) {
  const int vocab = model_->config().vocab_size;
  const std::vector<int> lens = {1, 3, 17, 33, 5, 64, 2, 40};
  const int decodes = 3;
  std::vector<TestSeq> seqs(lens.size());
  for (size_t i = 0; i < lens.size(); ++i)
    seqs[i].tokens = random_tokens(lens[i] + decodes, vocab, 100 + uint32_t(i));

  // Batched: step 1 prefills the first half of every prompt, step 2 the rest (sequences of
  // length 1 decode instead), then `decodes` steps of one token each. Threads 3 vs 1 alone.
  auto r = runner(16, 3);
  BlockPool pool(r->num_kv_blocks(), 21);
  std::vector<std::vector<float>> batched(lens.size());
  auto run_step = [&](const std::vector<int>& n_per_seq) {
    StepPlan b;
    std::vector<size_t> who;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (n_per_seq[i] == 0) continue;
      b.chunks.push_back(seqs[i].chunk(n_per_seq[i], 16, pool, LogitsWanted::kLast));
      who.push_back(i);
    }
    std::vector<float> logits;
    r->step(b, &logits);
    ASSERT_EQ(logits.size(), who.size() * size_t(vocab));
    for (size_t j = 0; j < who.size(); ++j)
      batched[who[j]].insert(batched[who[j]].end(), logits.begin() + j * vocab,
                             logits.begin() + (j + 1) * vocab);
  };
  std::vector<int> first, second;
  for (int len : lens) {
    first.push_back((len + 1) / 2);
    second.push_back(len - (len + 1) / 2);
  }
  run_step(first);
  run_step(second);
  for (int d = 0; d < decodes; ++d) run_step(std::vector<int>(lens.size(), 1));

  for (size_t i = 0; i < lens.size(); ++i) {
    auto alone = runner(16, 1);
    BlockPool p(alone->num_kv_blocks(), 77);
    TestSeq s;
    s.tokens = seqs[i].tokens;
    std::vector<float> got;
    std::vector<int> steps = {first[i], second[i]};
    for (int d = 0; d < decodes; ++d) steps.push_back(1);
    for (int n : steps) {
      if (n == 0) continue;
      StepPlan b;
      b.chunks.push_back(s.chunk(n, 16, p, LogitsWanted::kLast));
      alone->step(b, &got);
    }
    EXPECT_LE(max_rel_diff(got, batched[i]), kTol)
        << "sequence " << i << " (len " << lens[i] << ")";
  }
}

TEST_F(PagedInvariance, LogitsWantedSelectsRows) {
  const int vocab = model_->config().vocab_size;
  const auto tokens = random_tokens(12, vocab, 3);
  auto r = runner(16);
  const auto all = run_chunks(*r, tokens, {12}, 1);
  auto r2 = runner(16);
  BlockPool pool(r2->num_kv_blocks(), 2);
  TestSeq a, b;
  a.tokens = tokens;
  b.tokens = tokens;
  StepPlan batch;
  batch.chunks.push_back(a.chunk(12, 16, pool, LogitsWanted::kNone));
  batch.chunks.push_back(b.chunk(12, 16, pool, LogitsWanted::kLast));
  std::vector<float> got = {42.f};  // step appends: existing contents stay
  r2->step(batch, &got);
  ASSERT_EQ(got.size(), size_t(1 + vocab));
  EXPECT_EQ(got[0], 42.f);
  EXPECT_LE(max_rel_diff(std::vector<float>(got.begin() + 1, got.end()),
                         std::vector<float>(all.end() - vocab, all.end())),
            kTol);
}

// Greedy chunks come back as the argmax of the row the same step would otherwise return, in a
// batch that mixes greedy rows, whole rows (kLast and kAll) and kNone chunks; the whole rows are
// unchanged by their greedy neighbours.
TEST_F(PagedInvariance, GreedyChunksReturnTheArgmaxOfTheirRow) {
  const int vocab = model_->config().vocab_size;
  SamplingParams greedy, drawn;  // chunk 0 takes the argmax; chunk 4 the backend's sampler
  greedy.temperature = 0.f;
  drawn.temperature = 0.9f;
  drawn.top_k = 40;
  drawn.top_p = 0.95f;
  drawn.repetition_penalty = 1.2f;
  drawn.seed = 1234;
  const std::vector<int32_t> history = {1, 5, 9, 5};
  std::vector<float> plain, mixed;
  std::vector<int32_t> ids;
  const std::vector<int> lens = {5, 1, 9, 3, 7};
  for (int pass = 0; pass < 2; ++pass) {
    auto r = runner(16);
    BlockPool pool(r->num_kv_blocks(), 3);
    std::vector<TestSeq> seqs(lens.size());
    StepPlan b;
    for (size_t i = 0; i < lens.size(); ++i) {
      seqs[i].tokens = random_tokens(lens[i], vocab, uint32_t(50 + i));
      const LogitsWanted want = i == 2 ? LogitsWanted::kAll
                                : i == 3 ? LogitsWanted::kNone : LogitsWanted::kLast;
      b.chunks.push_back(seqs[i].chunk(lens[i], 16, pool, want));
      StepChunk& c = b.chunks.back();
      if (pass == 1 && i == 0) c.sample = SampleRequest{&greedy, {}, {}, 0};
      if (pass == 1 && i == 4) c.sample = SampleRequest{&drawn, history, history, 3};
      if (pass == 1 && (i == 0 || i == 4)) c.sample_path = choose_sample_path(*c.sample.params, vocab, true);
    }
    r->step(b, pass == 0 ? &plain : &mixed, pass == 0 ? nullptr : &ids);
  }
  // plain: rows of seq 0, 1, 2 (9 rows), 4; mixed: rows of seq 1 and 2; ids: seq 0 and 4.
  auto row = [&](const std::vector<float>& v, int r) {
    return std::vector<float>(v.begin() + size_t(r) * vocab, v.begin() + size_t(r + 1) * vocab);
  };
  auto argmax = [](const std::vector<float>& v) {
    return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
  };
  ASSERT_EQ(plain.size(), size_t(12) * vocab);
  ASSERT_EQ(mixed.size(), size_t(10) * vocab);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], argmax(row(plain, 0)));
  const std::vector<float> last = row(plain, 11);
  EXPECT_EQ(ids[1], sample_token(last, SampleRequest{&drawn, history, history, 3}).token);
  for (int r = 0; r < 10; ++r) EXPECT_EQ(row(mixed, r), row(plain, r + 1)) << r;
  // A greedy chunk without a place for its id, or with kAll, is refused.
  auto r = runner(16);
  BlockPool pool(r->num_kv_blocks(), 4);
  TestSeq seq;
  seq.tokens = {1, 2, 3};
  StepPlan b;
  b.chunks.push_back(seq.chunk(3, 16, pool, LogitsWanted::kAll));
  b.chunks.back().sample_path = SamplePath::kArgmax;
  std::vector<float> l;
  EXPECT_THROW(r->step(b, &l, &ids), Error);
  b.chunks.back().logits = LogitsWanted::kLast;
  EXPECT_THROW(r->step(b, &l, nullptr), Error);
}

}  // namespace
}  // namespace flashserve::test
