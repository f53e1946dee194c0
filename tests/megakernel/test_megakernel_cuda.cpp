// The decode megakernel on the GPU (label gpu; skipped without one), through ModelRunner with
// ModelRunnerOptions::megakernel on:
//  - logits of decode steps of 1, 2, 5 and 8 sequences (ragged lengths, shuffled blocks, block
//    size 16 and 4) against the CPU backend, on stories260K and small random Llama and Qwen3
//    shapes (head_dim 64 and 128, GQA, tied and untied heads), and of sequences of 700+ tokens
//    (several attention splits, several K/V staging passes);
//  - stories260K's greedy tokens equal the kernel-per-op CUDA path's over 100 steps.
// Tolerance as tests/backends/test_cuda_backend.cpp: the GPU rounds weights, K/V and the tile
// inputs to bf16 (relative 2^-9) where the CPU keeps f32: NMSE <= 1e-3 per row and max abs error
// <= 5% of the row's largest logit; one wrong op gives NMSE ~1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"
#include "weights/hf_config.h"

namespace flashserve::test {
namespace {

constexpr double kMaxNmse = 1e-3, kMaxAbsFrac = 0.05;
const std::string kStories = std::string(FS_MODELS_DIR) + "/stories260K";

std::unique_ptr<ModelRunner> make(const LoadedModel& m, const std::string& backend, bool mega,
                                  int block_size) {
  ModelRunnerOptions o;
  o.backend = backend;
  o.block_size = block_size;
  o.kv_cache_tokens = 8192;
  o.megakernel = mega;
  o.threads = 2;
  return ModelRunner::create(m, o);
}

// Each sequence's prompt (prompt + 5b tokens) prefilled in one step, then `steps` decode steps
// of every sequence feeding fixed tokens; returns the decode steps' logits in order.
std::vector<float> decode_logits(ModelRunner& r, int num_seqs, int steps, int vocab,
                                 int prompt = 11) {
  BlockPool pool(r.num_kv_blocks(), 5);
  std::vector<TestSeq> seqs(static_cast<size_t>(num_seqs));
  StepPlan prefill;
  for (int b = 0; b < num_seqs; ++b) {
    TestSeq& s = seqs[size_t(b)];
    s.tokens = random_tokens(prompt + 5 * b + steps, vocab, 100 + uint32_t(b));
    prefill.chunks.push_back(s.chunk(prompt + 5 * b, r.block_size(), pool, LogitsWanted::kLast));
  }
  std::vector<float> ignored, out;
  r.step(prefill, &ignored);
  for (int t = 0; t < steps; ++t) {
    StepPlan p;
    for (TestSeq& s : seqs) p.chunks.push_back(s.chunk(1, r.block_size(), pool, LogitsWanted::kLast));
    r.step(p, &out);
  }
  return out;
}

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu, int vocab) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t row = 0; row < cpu.size() / size_t(vocab); ++row) {
    double num = 0, den = 0, max_abs = 0, max_ref = 0;
    for (size_t i = row * vocab; i < (row + 1) * vocab; ++i) {
      const double e = double(gpu[i]) - cpu[i];
      num += e * e, den += double(cpu[i]) * cpu[i];
      max_abs = std::max(max_abs, std::abs(e)), max_ref = std::max(max_ref, std::abs(double(cpu[i])));
    }
    EXPECT_LE(num / den, kMaxNmse) << "row " << row;
    EXPECT_LE(max_abs, kMaxAbsFrac * max_ref) << "row " << row;
  }
}

void check_model(const LoadedModel& m) {
  const int vocab = m.config().vocab_size;
  for (int block_size : {16, 4})
    for (int batch : {1, 2, 5, 8}) {
      SCOPED_TRACE("batch " + std::to_string(batch) + " block_size " + std::to_string(block_size));
      auto cpu = make(m, "cpu", false, block_size);
      auto gpu = make(m, "cuda", true, block_size);
      expect_close(decode_logits(*gpu, batch, 6, vocab), decode_logits(*cpu, batch, 6, vocab),
                   vocab);
    }
}

TEST(MegakernelCuda, Stories260kLogitsMatchTheCpu) { check_model(*load_model(kStories)); }

// Long sequences: several attention splits hold keys (mega_active_splits: one per 64), their
// partials merge, and at head_dim 64/128 a split stages its keys in more than one pass (192/96
// keys a pass).
TEST(MegakernelCuda, LongSequencesMatchTheCpu) {
  auto long_context = [](ModelConfig& c) { c.max_model_len = 1024; };
  const RandomModelShape shapes[] = {
      {"d64_gqa_long", 256, 4, 2, 64, false, DType::kBF16, "LlamaForCausalLM", long_context},
      {"d128_gqa4_long", 512, 4, 1, 128, true, DType::kBF16, "LlamaForCausalLM", long_context}};
  for (const RandomModelShape& s : shapes) {
    SCOPED_TRACE(s.name);
    const std::string dir = fresh_dir(s.name);
    write_random_hf_model(dir, s.config(), 42, s.file_dtype, 1, 0.05f);
    const auto m = load_model(dir);
    const int vocab = m->config().vocab_size;
    for (int batch : {1, 8}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      auto cpu = make(*m, "cpu", false, 16);
      auto gpu = make(*m, "cuda", true, 16);
      expect_close(decode_logits(*gpu, batch, 4, vocab, 700),
                   decode_logits(*cpu, batch, 4, vocab, 700), vocab);
    }
  }
}

TEST(MegakernelCuda, RandomShapesMatchTheCpu) {
  const RandomModelShape shapes[] = {
      {"d64_gqa_untied", 256, 4, 2, 64, false, DType::kBF16},
      {"d128_gqa4_tied", 512, 4, 1, 128, true, DType::kBF16},
      {"qwen3_d128_gqa_tied", 256, 4, 2, 128, true, DType::kBF16, "Qwen3ForCausalLM"},
      {"qwen2_d64_gqa_tied", 256, 4, 2, 64, true, DType::kBF16, "Qwen2ForCausalLM"}};
  for (const RandomModelShape& s : shapes) {
    SCOPED_TRACE(s.name);
    const std::string dir = fresh_dir(s.name);
    write_random_hf_model(dir, s.config(), 42, s.file_dtype, 1, 0.05f);
    check_model(*load_model(dir));
  }
}

TEST(MegakernelCuda, Stories260kGreedyEqualsTheKernelPerOpPath) {
  auto m = load_model(kStories);
  std::vector<std::vector<int32_t>> runs;
  for (bool mega : {false, true}) {
    auto r = make(*m, "cuda", mega, 16);
    BlockPool pool(r->num_kv_blocks(), 3);
    TestSeq seq;
    seq.tokens = {1, 403, 407, 261, 378};  // BOS + a short prompt
    std::vector<int32_t> out;
    StepPlan first;
    first.chunks.push_back(seq.chunk(5, 16, pool, LogitsWanted::kLast));
    std::vector<float> logits;
    r->step(first, &logits);
    for (int t = 0; t < 100; ++t) {
      const auto next = int32_t(std::max_element(logits.end() - m->config().vocab_size,
                                                 logits.end()) -
                                (logits.end() - m->config().vocab_size));
      out.push_back(next);
      seq.tokens.push_back(next);
      StepPlan p;
      p.chunks.push_back(seq.chunk(1, 16, pool, LogitsWanted::kLast));
      logits.clear();
      r->step(p, &logits);
    }
    runs.push_back(out);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(MegakernelCuda, UnsupportedModelsFallBack) {
  ModelConfig c = small_config(256, 4, 2, 64, true);
  set_architecture(c, "MistralForCausalLM");
  set_sliding_layers(c, 8, 0);
  const std::string dir = fresh_dir("windowed");
  write_random_hf_model(dir, c, 42, DType::kBF16, 1, 0.05f);
  auto m = load_model(dir);
  auto gpu = make(*m, "cuda", true, 16);  // logs "megakernel off: sliding-window attention"
  auto cpu = make(*m, "cpu", false, 16);
  expect_close(decode_logits(*gpu, 2, 4, c.vocab_size), decode_logits(*cpu, 2, 4, c.vocab_size),
               c.vocab_size);
}

}  // namespace
}  // namespace flashserve::test
