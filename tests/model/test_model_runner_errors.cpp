// ModelRunner rejects what it cannot run with flashserve::Error (never a crash): unknown or
// unavailable backends, bad block sizes, and step batches with bad token ids, block ids, short
// block tables or missing pointers. After a rejected step the runner still works. gpt-oss under
// tensor parallelism (its MXFP4 experts, sinks and o biases are not cut by rank) is refused.
#include <gtest/gtest.h>

#include "core/error.h"
#include "backends/backend.h"
#include "model/model_runner.h"
#include "tests/model/gptoss_test_util.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

TEST(ModelRunnerErrors, RejectsBadOptionsAndBatches) {
  const std::string dir = fresh_dir("m");
  ModelConfig c = small_config(64, 2, 1, 32, true);
  write_random_hf_model(dir, c, 5, DType::kBF16, 1, 0.05f);
  auto model = load_model(dir);

  ModelRunnerOptions o;
  const bool gpu = cuda_backend_available();
  if (!gpu) {  // without a device (or without CUDA in the build) "cuda" is a clear error
    o.backend = "cuda";
    try {
      ModelRunner::create(*model, o);
      ADD_FAILURE() << "cuda backend accepted";
    } catch (const Error& e) {
      const std::string why = e.what();
      EXPECT_TRUE(why.find("built without CUDA backend") != std::string::npos ||
                  why.find("no CUDA device") != std::string::npos)
          << why;
    }
  }
  o.backend = "tpu";
  EXPECT_THROW(ModelRunner::create(*model, o), Error);
  o.backend = "cpu";
  o.block_size = 0;
  EXPECT_THROW(ModelRunner::create(*model, o), Error);
  o.block_size = 16;
  o.kv_cache_tokens = 100;
  o.backend = "auto";
  if (!gpu) {
    EXPECT_EQ(ModelRunner::create(*model, o)->backend_name(), "cpu");
  }
  o.backend = "cpu";
  auto r = ModelRunner::create(*model, o);
  EXPECT_EQ(r->backend_name(), "cpu");
  EXPECT_EQ(r->num_kv_blocks(), 7);  // ceil(100 / 16)

  std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<int32_t> blocks = {6};
  auto batch_with = [&](auto edit) {
    StepPlan b;
    StepChunk ch;
    ch.tokens = tokens.data();
    ch.num_tokens = 3;
    ch.block_table = &blocks;
    b.chunks.push_back(ch);
    edit(b.chunks[0]);
    return b;
  };
  std::vector<float> logits;
  EXPECT_THROW(r->step(batch_with([](StepChunk&) {}), nullptr), Error);
  std::vector<int32_t> bad_tokens = {1, 300, 3};
  EXPECT_THROW(r->step(batch_with([&](StepChunk& ch) { ch.tokens = bad_tokens.data(); }), &logits),
               Error);
  std::vector<int32_t> bad_blocks = {7};
  EXPECT_THROW(r->step(batch_with([&](StepChunk& ch) { ch.block_table = &bad_blocks; }), &logits),
               Error);
  EXPECT_THROW(r->step(batch_with([](StepChunk& ch) { ch.num_cached = 14; }), &logits), Error);
  EXPECT_THROW(r->step(batch_with([](StepChunk& ch) { ch.block_table = nullptr; }), &logits), Error);
  EXPECT_THROW(r->step(batch_with([](StepChunk& ch) { ch.num_tokens = 0; }), &logits), Error);
  EXPECT_THROW(r->step(batch_with([](StepChunk& ch) { ch.num_cached = -1; }), &logits), Error);
  EXPECT_TRUE(logits.empty());
  r->step(batch_with([](StepChunk&) {}), &logits);
  EXPECT_EQ(logits.size(), size_t(c.vocab_size));
  fs::remove_all(dir);
}

TEST(ModelRunnerErrors, GptOssRefusesTensorParallelism) {
  const std::string dir = fresh_dir("gptoss");
  write_random_hf_model(dir, gpt_oss_config(2), 5, DType::kBF16);
  auto model = load_model(dir);
  ModelRunnerOptions o;
  o.threads = 2;
  o.tensor_parallel_size = 2;
  try {
    ModelRunner::create(*model, o);
    ADD_FAILURE() << "gpt-oss loaded at tensor parallelism 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GptOssForCausalLM: tensor parallelism is not supported"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashserve::test
