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
#include "tests/backends/cuda_logits.h"
#include "tests/model/model_test_util.h"

namespace flashserve::test {
namespace {

const std::string kData = std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/";

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
