// Mixture-of-experts models through the CUDA backend (its MoE ops: docs/MOE_KERNELS.md) against
// the CPU backend (kernels/cpu/moe_ref.h over f32 weights): the random Qwen3-MoE, Mixtral and
// Qwen2-MoE models of tests/model/moe_test_util.h in bf16, with --quantize fp8, as an FP8
// per-channel checkpoint, and as GPTQ int4 (act-order) and block-wise FP8 checkpoints written
// by tools/quantize_checkpoint.py (those two skipped without a python3 that has numpy). Every
// position's logits from a whole prefill of 40 rows (the grouped path), and from decode steps
// of 1, 12 and 64 sequences in lockstep, replayed under CUDA graphs (the decode path, with
// experts that no token of the step chose). bf16 activations against fp32 give NMSE ~3e-5 (a
// wrong expert or weight ~1e-1), but routing turns a small difference into a large one where a
// token's k-th and (k+1)-th router logits nearly tie: one flipped expert puts that sequence's
// logits near 1e-3 (seen on an H100: bf16 worst 1.05e-3 of 12 sequences, typical 3e-5). So the
// bounds are per path:
//  - weight-only paths (bf16, int4, block FP8, and FP8 at one token): prefill 1e-3, the worst
//    decoded sequence 3e-3;
//  - FP8 row-scaled weights at several tokens run W8A8 (activations quantized to FP8 per row,
//    docs/FP8.md), whose noise on these small random models is NMSE ~2e-3 before routing
//    amplifies it: prefill 1e-2, worst decoded sequence 3e-2.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/model_runner.h"
#include "tests/backends/cuda_logits.h"
#include "tests/model/model_test_util.h"
#include "tests/model/moe_test_util.h"

namespace flashserve::test {
namespace {

struct Tolerance {
  double prefill, decode;
};
constexpr Tolerance kWeightOnly{1e-3, 3e-3};
constexpr Tolerance kW8A8{1e-2, 3e-2};

void expect_cuda_matches_cpu(const LoadedModel& m, const std::string& what,
                             Tolerance tol = kWeightOnly) {
  const int vocab = m.config().vocab_size;
  const std::vector<int32_t> ids = random_tokens(40, vocab, 8);
  ModelRunnerOptions o;
  o.backend = "cuda";
  const std::vector<float> cpu = all_logits(m, ids);
  const double prefill = nmse(prefill_logits(m, ids, o), cpu);
  std::printf("%s: prefill of 40 rows NMSE %.3e\n", what.c_str(), prefill);
  EXPECT_LT(prefill, tol.prefill) << what;
  for (int batch : {1, 12, 64}) {
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) seqs[size_t(i)] = random_tokens(16, vocab, 200 + i);
    const std::vector<std::vector<float>> got = decode_logits(m, seqs);
    double worst = 0;
    for (int i = 0; i < batch; i += batch > 12 ? 7 : 1)  // a sample of the 64
      worst = std::max(worst, nmse(got[size_t(i)], all_logits(m, seqs[size_t(i)])));
    std::printf("%s: decode of %d sequences, worst NMSE %.3e\n", what.c_str(), batch, worst);
    EXPECT_LT(worst, tol.decode) << what << ", " << batch << " sequences";
  }
}

class CudaMoe : public ::testing::TestWithParam<MoeCase> {};

TEST_P(CudaMoe, Bf16AndFp8MatchCpu) {
  const ModelConfig c = GetParam().config();
  const std::string bf16 = fresh_dir("bf16"), fp8 = fresh_dir("fp8");
  write_random_hf_model(bf16, c, 31, DType::kBF16, 1, 0.08f);
  write_random_hf_model(fp8, c, 31, DType::kF32, 1, 0.08f, Fp8Layout::kPerChannel);
  expect_cuda_matches_cpu(*load_model(bf16), std::string(GetParam().name) + " bf16");
  expect_cuda_matches_cpu(*load_model(bf16, LoadOptions{.quantize = Quantize::kFp8,
                                                        .fp8_in_backend = true}),
                          std::string(GetParam().name) + " --quantize fp8", kW8A8);
  expect_cuda_matches_cpu(*load_model(fp8), std::string(GetParam().name) + " FP8 checkpoint",
                          kW8A8);
}

TEST_P(CudaMoe, QuantizedCheckpointsMatchCpu) {
  if (std::system("python3 -c 'import numpy' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no python3 with numpy for tools/quantize_checkpoint.py";
  const std::string src = fresh_dir("src");
  write_random_hf_model(src, GetParam().config(), 32, DType::kF32, 1, 0.08f);
  for (const char* args : {"--format gptq --group-size 32 --asym --act-order",
                           "--format block-fp8 --block-size 32"}) {
    const std::string out = fresh_dir("q");
    const std::string cmd = "python3 " + std::string(FS_SOURCE_DIR) +
                            "/tools/quantize_checkpoint.py --source " + src + " --out " + out +
                            " " + args;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    expect_cuda_matches_cpu(*load_model(out), std::string(GetParam().name) + " " + args);
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, CudaMoe, ::testing::ValuesIn(moe_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace flashserve::test
