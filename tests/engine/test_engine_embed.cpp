// Embedding requests (GenerationRequest::embed) through the engine on a tiny random Qwen3 model
// (CPU backend, fp32): the pooled vector is the last prompt position's final-norm hidden state
// (checked through the lm_head: head · h must give the logits a generation step gives), the
// same alone as in a batch with chunked prefill, the prefix cache and a generation request
// beside it, and a prompt may fill the context but not exceed it.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "engine/engine.h"
#include "stream_util.h"
#include "weights/hf_config.h"
#include "weights/random_model.h"

namespace flashserve {
namespace {

namespace fs = std::filesystem;

// Observed: fp32 vs fp32 of one forward, differences of rounding only (~1e-6 relative).
constexpr double kMinCos = 0.9999;

const LoadedModel& tiny_qwen3() {
  static std::unique_ptr<LoadedModel> m = [] {
    ModelConfig c;
    set_architecture(c, "Qwen3ForCausalLM");
    c.hidden_size = 64, c.intermediate_size = 128, c.num_layers = 2, c.num_q_heads = 4;
    c.num_kv_heads = 2, c.head_dim = 16, c.vocab_size = 256, c.max_model_len = 128;
    c.rms_norm_eps = 1e-6f, c.rope_theta = 1e6f, c.eos_token_ids = {2};
    const std::string dir =
        (fs::temp_directory_path() / ("fs_embed_engine_" + std::to_string(getpid()))).string();
    // Weights of scale 0.2: large enough that the layers move the hidden state far from the
    // embedding row, so a wrong row or a missing norm shows.
    write_random_hf_model(dir, c, 5, DType::kF32, 1, 0.2f);
    auto model = load_model(dir);
    fs::remove_all(dir);  // the views are memory-mapped: the data stays until unmapped
    return model;
  }();
  return *m;
}

std::unique_ptr<ModelRunner> make_runner() {
  ModelRunnerOptions ro;
  ro.backend = "cpu", ro.block_size = 16, ro.kv_cache_tokens = 2048, ro.threads = 1;
  return ModelRunner::create(tiny_qwen3(), ro);
}

std::unique_ptr<Engine> make_engine(EngineOptions opts = {}) {
  return Engine::create(make_runner(), opts);
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i)
    ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

std::vector<int32_t> prompt(int len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(3 + int32_t(rng() % 250));
  return p;
}

GenerationRequest embed_request(std::vector<int32_t> ids) {
  GenerationRequest r;
  r.prompt = std::move(ids);
  r.embed = true;
  return r;
}

// One runner step over the whole prompt: its last position's logits, or its hidden state.
std::vector<float> run_prompt(ModelRunner& runner, const std::vector<int32_t>& ids, bool hidden) {
  std::vector<int32_t> blocks;
  for (int i = 0; i * 16 < int(ids.size()); ++i) blocks.push_back(i);
  StepPlan plan;
  StepChunk ch;
  ch.tokens = ids.data(), ch.num_tokens = int(ids.size()), ch.block_table = &blocks;
  ch.logits = hidden ? LogitsWanted::kHidden : LogitsWanted::kLast;
  plan.chunks.push_back(ch);
  std::vector<float> logits, states;
  runner.step(plan, &logits, nullptr, &states);
  return hidden ? states : logits;
}

TEST(EngineEmbed, PooledVectorIsTheFinalNormHiddenStateOfTheLastToken) {
  auto runner = make_runner();
  const TensorView& head = tiny_qwen3().tensor("lm_head.weight");  // [vocab, hidden] f32
  ASSERT_EQ(head.dtype, DType::kF32);
  const float* w = static_cast<const float*>(head.data);
  for (int len : {1, 7, 40}) {
    const auto ids = prompt(len, 100 + len);
    const std::vector<float> logits = run_prompt(*runner, ids, false);
    const std::vector<float> h = run_prompt(*runner, ids, true);
    ASSERT_EQ(h.size(), 64u);
    std::vector<float> via_head(256);
    for (int v = 0; v < 256; ++v) {
      double s = 0;
      for (int k = 0; k < 64; ++k) s += double(w[v * 64 + k]) * h[size_t(k)];
      via_head[size_t(v)] = float(s);
    }
    EXPECT_GE(cosine(via_head, logits), kMinCos) << "prompt of " << len;
    double max_diff = 0, max_logit = 0;
    for (int v = 0; v < 256; ++v) {
      max_diff = std::max(max_diff, std::abs(double(via_head[v]) - logits[v]));
      max_logit = std::max(max_logit, std::abs(double(logits[v])));
    }
    EXPECT_LE(max_diff, 1e-4 * max_logit) << "prompt of " << len;
  }
}

TEST(EngineEmbed, SameVectorAloneAndInAMixedBatch) {
  const std::vector<int> lens = {1, 5, 40, 77, 100, 128};
  std::vector<std::vector<int32_t>> prompts;
  for (int len : lens) prompts.push_back(prompt(len, 7 * len));
  // Shares its first 48 tokens with the 77-token prompt: the prefix cache serves them.
  prompts.push_back(prompts[3]);
  prompts.back().resize(60);
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) {
    auto engine = make_engine();
    Collected c = collect(*engine->submit(embed_request(p)));
    EXPECT_EQ(c.finish, FinishReason::kStop) << c.error;
    EXPECT_TRUE(c.tokens.empty());
    ASSERT_EQ(c.embedding.size(), 64u);
    alone.push_back(c.embedding);
  }
  GenerationRequest gen = make_request(prompt(30, 1), 12);
  gen.ignore_eos = true;
  const std::vector<int32_t> gen_alone = collect(*make_engine()->submit(gen)).tokens;
  ASSERT_EQ(gen_alone.size(), 12u);

  EngineOptions opts;
  opts.max_num_batched_tokens = 32;  // chunked prefill
  auto engine = make_engine(opts);
  auto gen_stream = engine->submit(gen);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& p : prompts) streams.push_back(engine->submit(embed_request(p)));
  for (size_t i = 0; i < prompts.size(); ++i) {
    Collected c = collect(*streams[i]);
    EXPECT_EQ(c.finish, FinishReason::kStop) << c.error;
    ASSERT_EQ(c.embedding.size(), 64u);
    EXPECT_GE(cosine(c.embedding, alone[i]), kMinCos) << "prompt " << i;
    for (size_t k = 0; k < 64; ++k) EXPECT_NEAR(c.embedding[k], alone[i][k], 1e-5) << i;
    if (i + 1 == prompts.size()) {
      EXPECT_GE(c.num_cached_tokens, 48) << "prefix cache unused";
    }
  }
  EXPECT_EQ(collect(*gen_stream).tokens, gen_alone) << "generation beside embeddings changed";
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.generation_tokens_total, 12u);
}

TEST(EngineEmbed, PromptMayFillTheContextButNotExceedIt) {
  auto engine = make_engine();
  Collected full = collect(*engine->submit(embed_request(prompt(128, 3))));
  EXPECT_EQ(full.finish, FinishReason::kStop) << full.error;
  EXPECT_EQ(full.embedding.size(), 64u);
  Collected over = collect(*engine->submit(embed_request(prompt(129, 3))));
  EXPECT_EQ(over.finish, FinishReason::kError);
  EXPECT_TRUE(over.embedding.empty());
  Collected empty = collect(*engine->submit(embed_request({})));
  EXPECT_EQ(empty.finish, FinishReason::kError);
}

}  // namespace
}  // namespace flashserve
