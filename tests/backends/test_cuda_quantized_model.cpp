// Int4 and block-wise FP8 checkpoints through the CUDA backend's packed paths
// (docs/QUANTIZATION.md) against the CPU backend, which runs their f32 dequantized weights: the
// committed one-layer models (tests/weights/data/quantized/: GPTQ sym and asym act-order, AWQ,
// compressed-tensors group asym act-order and channel sym, block FP8 with 16x16 blocks), every
// position's logits from a whole prefill (20 rows: the dequantize + bf16 GEMM path) and from
// decode steps of 1 and of 12 sequences in lockstep (the int4 kernel with one and with two n8
// tiles of rows; the block-FP8 warp kernel, 16x16 blocks being too narrow for the tensor-core
// one). The backend must say it holds packed weights. Tolerance as test_cuda_backend.cpp's: bf16
// activations against fp32 give NMSE ~1e-5, one wrong op ~1; the bound is 1e-3. The GPU weights
// are exact (the kernels scale exact dot products; the GEMM path rounds each weight to bf16 once).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "model/model_runner.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

const std::string kData = std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/";

std::unique_ptr<ModelRunner> cuda_runner(const LoadedModel& m) {
  ModelRunnerOptions o;
  o.backend = "cuda";
  o.kv_cache_tokens = 4096;
  return ModelRunner::create(m, o);
}

// Every position's logits of each sequence, stepped one token a step with all sequences together.
std::vector<std::vector<float>> decode_logits(const LoadedModel& m,
                                              const std::vector<std::vector<int32_t>>& seqs_ids) {
  auto r = cuda_runner(m);
  BlockPool pool(r->num_kv_blocks(), 5);
  std::vector<TestSeq> seqs(seqs_ids.size());
  for (size_t i = 0; i < seqs.size(); ++i) seqs[i].tokens = seqs_ids[i];
  const size_t vocab = size_t(m.config().vocab_size);
  std::vector<std::vector<float>> out(seqs.size());
  std::vector<float> logits;
  for (size_t t = 0; t < seqs_ids[0].size(); ++t) {
    StepPlan b;
    for (TestSeq& s : seqs) b.chunks.push_back(s.chunk(1, r->block_size(), pool, LogitsWanted::kLast));
    logits.clear();
    r->step(b, &logits);
    for (size_t i = 0; i < seqs.size(); ++i)
      out[i].insert(out[i].end(), logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
  }
  return out;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? num / den : num;
}

TEST(CudaQuantizedModel, Int4PackedMatchesCpu) {
  for (const std::string folder : {"gptq_sym", "gptq_asym_actorder", "awq", "ct_group_asym",
                                    "ct_channel_sym", "block_fp8"}) {
    SCOPED_TRACE(folder);
    auto q = load_model(kData + folder);
    const int vocab = q->config().vocab_size;
    const char* packed = folder == "block_fp8" ? "block-FP8" : "int4 packed";
    EXPECT_NE(cuda_runner(*q)->backend_name().find(packed), std::string::npos)
        << cuda_runner(*q)->backend_name();
    const std::vector<int32_t> ids = random_tokens(20, vocab, 8);
    const std::vector<float> cpu = all_logits(*q, ids);
    ModelRunnerOptions o;
    o.backend = "cuda";
    const double prefill = nmse(prefill_logits(*q, ids, o), cpu);
    std::printf("%s: prefill of 20 rows NMSE %.3e\n", folder.c_str(), prefill);
    EXPECT_LT(prefill, 1e-3);
    for (int batch : {1, 12}) {
      std::vector<std::vector<int32_t>> seqs(size_t(batch), ids);
      for (int i = 1; i < batch; ++i) seqs[size_t(i)] = random_tokens(20, vocab, 100 + i);
      const std::vector<std::vector<float>> got = decode_logits(*q, seqs);
      for (int i = 0; i < batch; ++i) {
        const double e = nmse(got[size_t(i)], i == 0 ? cpu : all_logits(*q, seqs[size_t(i)]));
        if (i == 0) std::printf("%s: decode, %d sequences, NMSE %.3e\n", folder.c_str(), batch, e);
        EXPECT_LT(e, 1e-3) << "sequence " << i << " of " << batch;
      }
    }
  }
}

}  // namespace
}  // namespace flashserve::test
