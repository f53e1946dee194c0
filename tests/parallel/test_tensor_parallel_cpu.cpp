// Tensor parallelism on the CPU stand-in: TP = 1, 2 and 4 give the same bits as no TP.
//
// Expected difference: exactly zero, logits included. Column-parallel outputs are computed element
// by element by the same loop whatever rank holds them; the row-parallel products (o, down) are
// cut into the same 4 k-slices with or without TP (shard_plan.h: row_parallel_slices) and the
// slices' partial sums are added in one pairwise order (reduction_order.h) whether a rank adds
// two of them before the all-reduce or one process adds all four; the all-reduce itself adds in
// that order; the vocabulary gather copies. docs/TENSOR_PARALLEL.md says more.
//
// Models: stories260K (heads 8/4, intermediate 172, vocab 512: 1, 2 and 4 all divide) and random
// GQA models where 4 ranks share 2 KV heads (each replicated twice), one per family flag (tied
// head, Qwen2 q/k/v biases, Qwen3 q/k norms); a ragged batch of prefill chunks and decodes with
// every logit row wanted (so the gather reorders several rows); then the engine end to end with
// greedy and seeded sampled requests (tokens drawn by rank 0's backend) and logprobs.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "engine/engine.h"
#include "model/model_runner.h"
#include "model/tensor_parallel_runner.h"
#include "tests/model/model_test_util.h"
#include "tests/parallel/tp_test_util.h"
#include "weights/hf_config.h"

namespace flashserve::test {
namespace {

const std::string kStories = std::string(FS_MODELS_DIR) + "/stories260K";

std::unique_ptr<ModelRunner> make_runner(const LoadedModel& m, int tp, int threads = 2) {
  ModelRunnerOptions o;
  o.backend = "cpu";
  o.threads = threads;
  o.kv_cache_tokens = 4096;
  o.tensor_parallel_size = tp;
  // tp 0 here: no tensor parallelism; 1 also goes through the group machinery (one rank).
  if (tp == 0) {
    o.tensor_parallel_size = 1;
    return ModelRunner::create(m, o);
  }
  return make_tensor_parallel_runner(m, o);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(TensorParallelCpu, Stories260kSameBitsAsNoTensorParallelism) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "model not found: " << kStories;
  auto model = load_model(kStories);
  const std::vector<int32_t> want = stories260k_greedy_ids();
  ASSERT_EQ(want.size(), 64u);
  std::vector<float> ref_logits;
  auto ref = make_runner(*model, 0);
  EXPECT_EQ(greedy(*ref, 64, &ref_logits), want) << "no TP: the numpy reference's text";
  for (int tp : {1, 2, 4}) {
    auto r = make_runner(*model, tp);
    EXPECT_NE(r->backend_name().find("tensor parallel"), std::string::npos) << r->backend_name();
    std::vector<float> logits;
    EXPECT_EQ(greedy(*r, 64, &logits), want) << "TP " << tp;
    EXPECT_TRUE(same_bits(logits, ref_logits)) << "TP " << tp << ": logits differ from no TP, max "
                                               << max_rel_diff(logits, ref_logits);
  }
}

TEST(TensorParallelCpu, SizeThatDoesNotDivideIsAStartUpError) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "model not found: " << kStories;
  auto model = load_model(kStories);
  try {
    make_runner(*model, 3);
    FAIL() << "TP 3 over 8 heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor-parallel-size 3 does not divide"), std::string::npos)
        << e.what();
  }
  ModelRunnerOptions o;
  o.tensor_parallel_size = 8;  // through ModelRunner::create, as the programs call it
  o.backend = "cpu";
  EXPECT_THROW(ModelRunner::create(*model, o), Error);
}


struct Family {
  const char* name;
  bool tied;
  const char* architecture;
};

void PrintTo(const Family& f, std::ostream* os) { *os << f.name; }

class TensorParallelRandom : public ::testing::TestWithParam<Family> {};

TEST_P(TensorParallelRandom, RaggedBatchSameBitsAsNoTensorParallelism) {
  const Family f = GetParam();
  ModelConfig c = small_config(128, 8, 2, 16, f.tied);  // intermediate 200, vocab 300
  set_architecture(c, f.architecture);
  const std::string dir = fresh_dir(f.name);
  write_random_hf_model(dir, c, 5, DType::kBF16, 2, 0.08f);
  auto model = load_model(dir);
  auto ref = make_runner(*model, 0);
  const std::vector<float> want = ragged_batch_logits(*ref);
  ASSERT_EQ(want.size() % 300, 0u);
  for (int tp : {1, 2, 4}) {
    auto r = make_runner(*model, tp, 4);
    const std::vector<float> got = ragged_batch_logits(*r);
    EXPECT_TRUE(same_bits(got, want)) << f.name << " TP " << tp << ": max rel diff "
                                      << max_rel_diff(got, want);
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Families, TensorParallelRandom,
    ::testing::Values(Family{"llama_tied", true, "LlamaForCausalLM"},
                      Family{"llama_untied", false, "LlamaForCausalLM"},
                      Family{"qwen2_bias", true, "Qwen2ForCausalLM"},
                      Family{"qwen3_qk_norm", false, "Qwen3ForCausalLM"}),
    [](const auto& info) { return std::string(info.param.name); });

// The engine over a TP = 2 runner: the same tokens as over no TP for greedy, seeded sampled
// (drawn by rank 0's backend) and logprob requests (host sampler) sharing batches.
std::vector<std::vector<int32_t>> engine_tokens(std::unique_ptr<ModelRunner> runner) {
  EngineOptions eo;
  eo.max_num_batched_tokens = 64;  // prompts prefill in chunks
  auto engine = Engine::create(std::move(runner), eo);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest req;
    req.prompt = random_tokens(10 + 17 * i, 512, 70 + uint32_t(i));
    req.prompt[0] = 1;
    req.max_tokens = 24;
    req.ignore_eos = true;
    req.has_seed = true;
    req.sampling.seed = 1000 + uint64_t(i);
    req.sampling.temperature = i % 3 == 0 ? 0.f : 0.9f;
    req.sampling.top_k = i % 3 == 2 ? 40 : 0;
    req.sampling.logprobs = i == 4 ? 2 : -1;
    streams.push_back(engine->submit(std::move(req)));
  }
  std::vector<std::vector<int32_t>> out(streams.size());
  for (size_t i = 0; i < streams.size(); ++i)
    while (auto ev = streams[i]->next(std::chrono::seconds(60))) {
      if (ev->kind == StreamEvent::Kind::kToken) out[i].push_back(ev->token.token);
      if (ev->kind == StreamEvent::Kind::kFinished) {
        EXPECT_EQ(ev->finish, FinishReason::kLength) << ev->error;
        break;
      }
    }
  engine->shutdown();
  return out;
}

TEST(TensorParallelCpu, EngineSameTokensAsNoTensorParallelism) {
  if (!fs::exists(kStories)) GTEST_SKIP() << "model not found: " << kStories;
  auto model = load_model(kStories);
  const auto want = engine_tokens(make_runner(*model, 0));
  for (const auto& t : want) ASSERT_EQ(t.size(), 24u);
  EXPECT_EQ(engine_tokens(make_runner(*model, 2)), want);
}

}  // namespace
}  // namespace flashserve::test
