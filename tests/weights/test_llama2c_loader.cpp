// The llama2.c loader on the real stories260K checkpoint (config, tensor placement against the
// raw file bytes, the q/k RoPE row permutation) and on small hand-made and damaged .bin files.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "tests/weights/weights_test_util.h"
#include "weights/loaded_model.h"

namespace flashserve {
namespace {

using test::fresh_dir;
using test::read_bytes;
const std::string kStoriesDir = std::string(FS_MODELS_DIR) + "/stories260K";
const std::string kStoriesBin = kStoriesDir + "/stories260K.bin";

// Row `row` of a [rows, cols] f32 array starting `offset` floats after the 28-byte header.
std::vector<float> raw_row(const std::vector<uint8_t>& file, int64_t offset, int64_t row, int64_t cols) {
  std::vector<float> out(static_cast<size_t>(cols));
  std::memcpy(out.data(), file.data() + 28 + 4 * (offset + row * cols), 4 * size_t(cols));
  return out;
}

std::vector<float> view_row(const TensorView& t, int64_t row) {
  const int64_t cols = t.shape.back();
  const float* p = static_cast<const float*>(t.data) + row * cols;
  return std::vector<float>(p, p + cols);
}

std::string load_error(const std::string& path) {
  return test::error_of([&] { load_model(path); }, "(no error)");
}

TEST(Llama2cLoader, Stories260KConfig) {
  for (const std::string& path : {kStoriesDir, kStoriesBin}) {
    auto model = load_model(path);
    const ModelConfig& c = model->config();
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.intermediate_size, 172);
    EXPECT_EQ(c.num_layers, 5);
    EXPECT_EQ(c.num_q_heads, 8);
    EXPECT_EQ(c.num_kv_heads, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.max_model_len, 512);
    EXPECT_FLOAT_EQ(c.rope_theta, 10000.f);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
    EXPECT_EQ(c.rope_scaling.type, "none");
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.bos_token_id, 1);
    EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 1}));  // llama2.c stops at BOS too
    EXPECT_FALSE(model->has_tensor("lm_head.weight"));
    EXPECT_EQ(model->tokenizer_path(), kStoriesDir + "/tok512.model");
    EXPECT_EQ(model->tensor("model.layers.4.self_attn.k_proj.weight").shape,
              (std::vector<int64_t>{32, 64}));
    EXPECT_EQ(model->tensor("model.layers.0.mlp.down_proj.weight").shape,
              (std::vector<int64_t>{64, 172}));
  }
}

TEST(Llama2cLoader, TensorsMatchRawBytesAndQkArePermuted) {
  auto model = load_model(kStoriesDir);
  const auto file = read_bytes(kStoriesBin);
  const int64_t V = 512, D = 64, L = 5, H = 172, KV = 32, hd = 8;
  // Offsets (in floats) of each array in the legacy layout.
  const int64_t emb = 0, rms_att = emb + V * D, wq = rms_att + L * D, wk = wq + L * D * D,
                wv = wk + L * KV * D, wo = wv + L * KV * D, rms_ffn = wo + L * D * D,
                w1 = rms_ffn + L * D, w2 = w1 + L * H * D, w3 = w2 + L * D * H,
                rms_final = w3 + L * H * D;
  const TensorView& e = model->tensor("model.embed_tokens.weight");
  EXPECT_TRUE(test::is_mapped_from(e.data, kStoriesBin)) << "embedding must be a view of the mmap";
  for (int64_t r : {0, 7, 511}) EXPECT_EQ(view_row(e, r), raw_row(file, emb, r, D));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_EQ(view_row(model->tensor(p + "input_layernorm.weight"), 0), raw_row(file, rms_att, l, D));
    EXPECT_EQ(view_row(model->tensor(p + "post_attention_layernorm.weight"), 0),
              raw_row(file, rms_ffn, l, D));
    for (int64_t r : {0, 5, 31}) {
      EXPECT_EQ(view_row(model->tensor(p + "self_attn.v_proj.weight"), r), raw_row(file, wv, l * KV + r, D));
      EXPECT_EQ(view_row(model->tensor(p + "mlp.gate_proj.weight"), r), raw_row(file, w1, l * H + r, D));
      EXPECT_EQ(view_row(model->tensor(p + "mlp.up_proj.weight"), r), raw_row(file, w3, l * H + r, D));
      EXPECT_EQ(view_row(model->tensor(p + "mlp.down_proj.weight"), r), raw_row(file, w2, l * D + r, H));
      EXPECT_EQ(view_row(model->tensor(p + "self_attn.o_proj.weight"), r), raw_row(file, wo, l * D + r, D));
    }
    // q/k: new row j = old 2j, new row j + hd/2 = old 2j + 1, within each head.
    const TensorView& q = model->tensor(p + "self_attn.q_proj.weight");
    const TensorView& k = model->tensor(p + "self_attn.k_proj.weight");
    EXPECT_FALSE(test::is_mapped_from(q.data, kStoriesBin)) << "q is permuted into a loader buffer";
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t j = 0; j < hd / 2; ++j) {
        EXPECT_EQ(view_row(q, h * hd + j), raw_row(file, wq, l * D + h * hd + 2 * j, D));
        EXPECT_EQ(view_row(q, h * hd + j + hd / 2), raw_row(file, wq, l * D + h * hd + 2 * j + 1, D));
        if (h < 4) {
          EXPECT_EQ(view_row(k, h * hd + j), raw_row(file, wk, l * KV + h * hd + 2 * j, D));
          EXPECT_EQ(view_row(k, h * hd + j + hd / 2), raw_row(file, wk, l * KV + h * hd + 2 * j + 1, D));
        }
      }
  }
  EXPECT_EQ(view_row(model->tensor("model.norm.weight"), 0), raw_row(file, rms_final, 0, D));
}

// A small llama2.c file with a separate head (negative vocab_size); value i at float index i.
std::string write_small_bin(const std::string& dir, bool truncate = false) {
  const int32_t dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 10, seq = 4;
  const int32_t hdr[7] = {dim, hidden, layers, heads, kv_heads, -vocab, seq};
  const int kv = dim * kv_heads / heads;
  const size_t n = vocab * dim + layers * (dim + dim * dim + 2 * kv * dim + dim * dim + dim +
                                           3 * hidden * dim) + dim + seq * (dim / heads) + vocab * dim;
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = float(i);
  std::vector<uint8_t> bytes(28 + 4 * n);
  std::memcpy(bytes.data(), hdr, 28);
  std::memcpy(bytes.data() + 28, values.data(), 4 * n);
  if (truncate) bytes.resize(bytes.size() - 4);
  const std::string path = dir + "/small.bin";
  test::write_bytes(path, bytes.data(), bytes.size());
  return path;
}

TEST(Llama2cLoader, SeparateHeadAfterRopeTables) {
  const std::string path = write_small_bin(fresh_dir("bin"));
  auto model = load_model(path);
  EXPECT_FALSE(model->config().tie_word_embeddings);
  EXPECT_EQ(model->config().vocab_size, 10);
  EXPECT_EQ(model->config().num_kv_heads, 1);
  EXPECT_EQ(model->tokenizer_path(), "");
  const TensorView& head = model->tensor("lm_head.weight");
  EXPECT_EQ(head.shape, (std::vector<int64_t>{10, 8}));
  // The head is the last vocab*dim floats of the file.
  const int64_t total = (int64_t(read_bytes(path).size()) - 28) / 4;
  EXPECT_EQ(static_cast<const float*>(head.data)[0], float(total - 80));
  EXPECT_EQ(static_cast<const float*>(model->tensor("model.norm.weight").data)[0],
            float(total - 80 - 16 - 8));  // head, rope tables, norm
}

TEST(Llama2cLoader, BadFilesGiveClearErrors) {
  const std::string dir = fresh_dir("bad");
  std::string msg = load_error(write_small_bin(dir, /*truncate=*/true));
  EXPECT_NE(msg.find("small.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;

  const auto stories = read_bytes(kStoriesBin);
  test::write_bytes(dir + "/short.bin", stories.data(), 20);
  msg = load_error(dir + "/short.bin");
  EXPECT_NE(msg.find("short.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shorter than the 28-byte header"), std::string::npos) << msg;

  test::write_bytes(dir + "/half.bin", stories.data(), stories.size() / 2);
  msg = load_error(dir + "/half.bin");
  EXPECT_NE(msg.find("half.bin: llama2.c checkpoint is 528270 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(truncated)"), std::string::npos) << msg;

  std::vector<uint8_t> bad = stories;
  const int32_t zero_heads = 0;
  std::memcpy(bad.data() + 12, &zero_heads, 4);
  test::write_bytes(dir + "/heads.bin", bad.data(), bad.size());
  msg = load_error(dir + "/heads.bin");
  EXPECT_NE(msg.find("heads.bin: bad llama2.c header"), std::string::npos) << msg;

  const int32_t huge = 1 << 30;
  bad = stories;
  std::memcpy(bad.data() + 4, &huge, 4);
  test::write_bytes(dir + "/huge.bin", bad.data(), bad.size());
  msg = load_error(dir + "/huge.bin");
  EXPECT_NE(msg.find("huge.bin: implausible llama2.c header"), std::string::npos) << msg;

  msg = load_error(dir);  // now holds several .bin files
  EXPECT_NE(msg.find("more than one *.bin"), std::string::npos) << msg;
  msg = load_error(fresh_dir("empty"));
  EXPECT_NE(msg.find("no config.json (Hugging Face) and no *.bin"), std::string::npos) << msg;
  msg = load_error(dir + "/does_not_exist");
  EXPECT_NE(msg.find("does_not_exist: model path does not exist"), std::string::npos) << msg;
}

}  // namespace
}  // namespace flashserve
