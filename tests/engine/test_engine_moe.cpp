// The engine over random mixture-of-experts models of the three architectures
// (tests/model/moe_test_util.h) on the CPU backend: sixteen requests sharing prompt prefixes,
// greedy and seeded, some constrained to a JSON schema, give the same tokens run one at a time
// (no prefix caching, whole prefills, room for all) as run together with prefix caching,
// chunked prefill (a 24-token step budget) and a KV cache small enough to preempt, and at
// tensor parallelism 2 (the CPU stand-in communicator). Constrained outputs are the schema's
// objects. The routing of each token does not depend on what else is in the step.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

#include "engine/engine.h"
#include "stream_util.h"
#include "structured/compiled_grammar.h"
#include "tests/common/temp_dir.h"
#include "tests/model/moe_test_util.h"
#include "weights/random_model.h"

namespace flashserve {
namespace {

using structured::GrammarCompiler;
using structured::TokenVocabulary;
using structured::VocabTrie;

constexpr const char* kSchema =
    R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99}},)"
    R"("required":["a"],"additionalProperties":false})";
constexpr int kBlock = 4;

// Ids 5.. spell one character each; the rest of the vocabulary has no text.
std::shared_ptr<const VocabTrie> trie(int vocab, int32_t eos) {
  TokenVocabulary v;
  v.token_bytes.assign(size_t(vocab), "");
  const std::string chars = "{}[]\":,-. abcdefghijklmnopqrstuvwxyz0123456789";
  for (size_t i = 0; i < chars.size(); ++i) v.token_bytes[5 + i] = chars.substr(i, 1);
  v.stop_ids = {eos};
  return std::make_shared<const VocabTrie>(std::move(v));
}

class EngineMoe : public ::testing::TestWithParam<test::MoeCase> {
 protected:
  void SetUp() override {
    dir_ = test::fresh_dir(GetParam().name);
    write_random_hf_model(dir_, GetParam().config(), 21, DType::kBF16, 1, 0.08f);
    model_ = load_model(dir_);
    compiler_ = std::make_unique<GrammarCompiler>(
        trie(model_->config().vocab_size, model_->config().eos_token_ids[0]));
  }

  std::unique_ptr<Engine> make(bool caching, int64_t kv_tokens, int batched, int tp = 1) {
    ModelRunnerOptions ro;
    ro.backend = "cpu";
    ro.block_size = kBlock;
    ro.kv_cache_tokens = kv_tokens;
    ro.threads = 1;
    ro.tensor_parallel_size = tp;
    EngineOptions eo;
    eo.enable_prefix_caching = caching;
    eo.max_num_batched_tokens = batched;
    return Engine::create(ModelRunner::create(*model_, ro), eo);
  }

  // Four shared prefixes of 9..21 tokens, each request its own tail; even requests greedy, odd
  // seeded at temperature 1; every fourth constrained to kSchema.
  std::vector<GenerationRequest> requests() {
    std::mt19937 rng(5);
    const int vocab = model_->config().vocab_size;
    std::vector<std::vector<int32_t>> prefixes;
    for (int p = 0; p < 4; ++p) {
      std::vector<int32_t> prefix;
      for (int j = 0; j < 9 + 4 * p; ++j) prefix.push_back(int32_t(5 + rng() % (vocab - 5)));
      prefixes.push_back(prefix);
    }
    std::vector<GenerationRequest> out;
    for (int i = 0; i < 16; ++i) {
      std::vector<int32_t> prompt = prefixes[size_t(i % 4)];
      for (int j = 0; j < 1 + i % 5; ++j) prompt.push_back(int32_t(5 + rng() % (vocab - 5)));
      GenerationRequest r = make_request(prompt, 12, i % 2 ? 1.f : 0.f, 300 + i);
      r.ignore_eos = true;
      if (i % 4 == 3) {
        r.ignore_eos = false;
        r.max_tokens = 40;
        OutputConstraint c;
        c.grammar = compiler_->json_schema(kSchema);
        r.constraint = std::move(c);
      }
      out.push_back(r);
    }
    return out;
  }

  std::string dir_;
  std::unique_ptr<LoadedModel> model_;
  std::unique_ptr<GrammarCompiler> compiler_;
};

TEST_P(EngineMoe, TogetherWithCachingChunkingAndPreemptionEqualsAlone) {
  const auto reqs = requests();
  std::vector<std::vector<int32_t>> alone;
  {
    auto engine = make(false, 4096, 512);
    for (const auto& r : reqs) {
      Collected c = collect(*engine->submit(r));
      ASSERT_NE(c.finish, FinishReason::kError) << c.error;
      alone.push_back(c.tokens);
    }
  }
  int objects = 0;
  for (size_t i = 3; i < reqs.size(); i += 4) {
    if (alone[i].empty() || alone[i].back() != model_->config().eos_token_ids[0]) continue;
    std::string text;
    for (size_t t = 0; t + 1 < alone[i].size(); ++t)
      text += compiler_->trie().vocabulary().token_bytes[size_t(alone[i][t])];
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("a")) << text;
    ++objects;
  }
  EXPECT_GT(objects, 0) << "no constrained request finished: the schema was never checked";

  struct Run {
    const char* what;
    int64_t kv_tokens;
    int batched, tp;
  };
  for (const Run& run : {Run{"prefix caching, chunked prefill, preemption", 96, 24, 1},
                         Run{"the same at tensor parallelism 2", 96, 24, 2}}) {
    SCOPED_TRACE(run.what);
    auto engine = make(true, run.kv_tokens, run.batched, run.tp);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : reqs) streams.push_back(engine->submit(r));
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_NE(streams[i], nullptr);
      Collected c = collect(*streams[i]);
      ASSERT_NE(c.finish, FinishReason::kError) << c.error;
      EXPECT_EQ(c.tokens, alone[i]) << "request " << i;
    }
    const EngineMetrics m = engine->metrics();
    EXPECT_GT(m.num_preemptions, 0u);
    EXPECT_GT(m.prefix_cache_hits_tokens_total, 0u);
    EXPECT_FALSE(engine->failed());
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, EngineMoe, ::testing::ValuesIn(test::moe_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flashserve
