// A random gpt-oss model (tests/model/gptoss_test_util.h at head_dim 64: MXFP4 experts, biases,
// sinks, windows of 8 keys alternating with full layers, YaRN) through the CUDA backend against
// the CPU backend: every position's logits of a whole prefill of 100 rows (the grouped MXFP4
// GEMM path) and of 40 rows (the GEMV path), and decode steps of 1, 12 and 64 sequences of 16
// tokens in lockstep (past the window), replayed under CUDA graphs. The MXFP4 weights are exact
// on both sides; bf16 activations against f32 give NMSE ~1e-5 where routing agrees, and a
// near-tie of a token's k-th and (k+1)-th router logits can flip one expert (tests of the other
// MoE models: docs/MODELS.md): bounds as test_cuda_moe_model.cpp's weight-only paths, prefill
// 1e-3 and the worst decoded sequence 3e-3. A missing sink or bias moves them to ~1e-1.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "model/model_runner.h"
#include "tests/backends/cuda_logits.h"
#include "tests/model/gptoss_test_util.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

TEST(CudaGptOss, MatchesCpu) {
  const std::string dir = fresh_dir("gptoss");
  write_random_hf_model(dir, gpt_oss_config(3, 64), 33, DType::kBF16, 1, 0.08f);
  const auto m = load_model(dir);
  const int vocab = m->config().vocab_size;
  ModelRunnerOptions o;
  o.backend = "cuda";
  for (int rows : {100, 40}) {
    const std::vector<int32_t> ids = random_tokens(rows, vocab, 8);
    const double prefill = nmse(prefill_logits(*m, ids, o), all_logits(*m, ids));
    std::printf("gpt-oss: prefill of %d rows NMSE %.3e\n", rows, prefill);
    EXPECT_LT(prefill, 1e-3) << rows << " rows";
  }
  for (int batch : {1, 12, 64}) {
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) seqs[size_t(i)] = random_tokens(16, vocab, 200 + i);
    const std::vector<std::vector<float>> got = decode_logits(*m, seqs);
    double worst = 0;
    for (int i = 0; i < batch; i += batch > 12 ? 7 : 1)  // a sample of the 64
      worst = std::max(worst, nmse(got[size_t(i)], all_logits(*m, seqs[size_t(i)])));
    std::printf("gpt-oss: decode of %d sequences, worst NMSE %.3e\n", batch, worst);
    EXPECT_LT(worst, 3e-3) << batch << " sequences";
  }
}

}  // namespace
}  // namespace flashserve::test
