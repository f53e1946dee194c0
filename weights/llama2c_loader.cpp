// llama2.c "legacy v0" checkpoints: a header of seven int32 (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len) and fp32 arrays, mapped to the HF tensor names. Every tensor
// points into the mapped file except q_proj/k_proj, whose rows are permuted into a loader-owned
// buffer so that HF rotate-half RoPE gives llama2.c's interleaved-pair result.
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model_impl.h"

namespace flashserve {
namespace fs = std::filesystem;

namespace {

constexpr int32_t kVersionedMagic = 0x616b3432;  // "ak42": llama2.c export versions 1 and 2

// tokenizer.model beside the .bin, else the single tok*.model there; "" if none or ambiguous.
std::string find_tokenizer(const fs::path& bin) {
  fs::path dir = bin.parent_path().empty() ? fs::path(".") : bin.parent_path();
  if (fs::exists(dir / "tokenizer.model")) return (dir / "tokenizer.model").string();
  std::vector<fs::path> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("tok", 0) == 0 && e.path().extension() == ".model") found.push_back(e.path());
  }
  return found.size() == 1 ? found[0].string() : "";
}

// Rows of one head [head_dim, hidden] reordered: new j = old 2j, new j + head_dim/2 = old 2j+1.
// llama2.c rotates pairs (2i, 2i+1); after this, pairs (i, i + head_dim/2) hold the same values.
void permute_rope_rows(const float* src,  // [num_heads * head_dim, hidden_size]
                       float* dst,        // [num_heads * head_dim, hidden_size]
                       int num_heads, int head_dim, int hidden_size) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h)
    for (int j = 0; j < head_dim; ++j) {
      int old_row = j < half ? 2 * j : 2 * (j - half) + 1;
      std::memcpy(dst + (int64_t(h) * head_dim + j) * hidden_size,
                  src + (int64_t(h) * head_dim + old_row) * hidden_size,
                  sizeof(float) * size_t(hidden_size));
    }
}

}  // namespace

std::unique_ptr<ModelImpl> load_llama2c(const std::string& bin_path) {
  auto model = std::make_unique<ModelImpl>(bin_path);
  model->files_.push_back(std::make_unique<MappedFile>(bin_path));
  const MappedFile& file = *model->files_.back();
  int32_t hdr[7];
  if (file.size() < sizeof(hdr))
    FS_THROW(bin_path, ": truncated llama2.c checkpoint: ", file.size(),
             " bytes, shorter than the 28-byte header");
  std::memcpy(hdr, file.data(), sizeof(hdr));
  if (hdr[0] == kVersionedMagic)
    FS_THROW(bin_path, ": llama2.c export version 1/2 is not supported (legacy v0 only)");
  const int dim = hdr[0], hidden = hdr[1], layers = hdr[2], heads = hdr[3], kv_heads = hdr[4];
  const int64_t vocab64 = hdr[5] < 0 ? -int64_t(hdr[5]) : int64_t(hdr[5]);
  const int seq_len = hdr[6];
  // Caps keep every size product below 2^63; real checkpoints are far smaller.
  if (dim > (1 << 20) || hidden > (1 << 20) || layers > (1 << 12) || vocab64 > (1 << 24) ||
      seq_len > (1 << 24))
    FS_THROW(bin_path, ": implausible llama2.c header (dim ", dim, ", hidden_dim ", hidden,
             ", n_layers ", layers, ", vocab_size ", hdr[5], ", seq_len ", seq_len, ")");
  const int vocab = int(vocab64);
  if (dim <= 0 || heads <= 0 || dim % heads != 0)
    FS_THROW(bin_path, ": bad llama2.c header: dim ", dim, " and n_heads ", heads,
             " (dim must be a positive multiple of n_heads)");

  ModelConfig& c = model->config_;
  c.hidden_size = dim;
  c.intermediate_size = hidden;
  c.num_layers = layers;
  c.num_q_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.vocab_size = vocab;
  c.max_model_len = seq_len;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.f;
  c.tie_word_embeddings = hdr[5] > 0;
  c.bos_token_id = 1;
  // llama2.c's sampler ends a sequence at BOS: its training data joins stories with BOS, so a
  // story's end is BOS. EOS (2) stays a stop id too. Fixed here, so the tokenizer's EOS does not
  // replace them (LoadedModel::use_tokenizer_eos).
  c.eos_token_ids = {2, 1};
  c.eos_from_config = true;
  validate_config(c, bin_path + " (llama2.c header)");

  // Sizes in floats; checked in 64 bits before any pointer is formed.
  const int64_t L = layers, kv_dim = int64_t(kv_heads) * c.head_dim, hd = hidden;
  const int64_t rope_tables = int64_t(seq_len) * c.head_dim;  // two tables of seq_len*head_dim/2
  const int64_t num_floats = int64_t(vocab) * dim + L * dim + L * dim * dim + 2 * L * kv_dim * dim +
                             L * dim * dim + L * dim + 3 * L * hd * dim + dim + rope_tables +
                             (c.tie_word_embeddings ? 0 : int64_t(vocab) * dim);
  const int64_t expected = int64_t(sizeof(hdr)) + 4 * num_floats;
  if (int64_t(file.size()) != expected)
    FS_THROW(bin_path, ": llama2.c checkpoint is ", file.size(), " bytes but its header (dim ", dim,
             ", hidden_dim ", hidden, ", n_layers ", layers, ", n_heads ", heads, ", n_kv_heads ",
             kv_heads, ", vocab_size ", hdr[5], ", seq_len ", seq_len, ") needs ", expected,
             int64_t(file.size()) < expected ? " (truncated)" : " (trailing data)");

  // The data starts at byte 28 of a page-aligned mapping, so it is float-aligned.
  const float* p = reinterpret_cast<const float*>(file.data() + sizeof(hdr));
  auto view = [](const float* data, std::vector<int64_t> shape) {
    return TensorView{DType::kF32, std::move(shape), data};
  };
  auto& t = model->tensors_;
  auto layer = [](int64_t i, const char* name) { return str_cat("model.layers.", i, ".", name); };
  t["model.embed_tokens.weight"] = view(p, {vocab, dim});
  p += int64_t(vocab) * dim;
  // Each per-layer array is [L, rows, cols]: one view per layer.
  auto per_layer = [&](const char* name, std::vector<int64_t> shape) {
    const int64_t n = shape.size() == 1 ? shape[0] : shape[0] * shape[1];
    for (int64_t i = 0; i < L; ++i) t[layer(i, name)] = view(p + i * n, shape);
    p += L * n;
  };
  // q/k: copy each layer through the RoPE row permutation into one owned buffer.
  auto per_layer_permuted = [&](const char* name, int num_heads) {
    const int64_t rows = int64_t(num_heads) * c.head_dim, n = L * rows * dim;
    model->owned_.push_back(std::make_unique<float[]>(size_t(n)));
    float* dst = model->owned_.back().get();
    for (int64_t i = 0; i < L; ++i) {
      permute_rope_rows(p + i * rows * dim, dst + i * rows * dim, num_heads, c.head_dim, dim);
      t[layer(i, name)] = view(dst + i * rows * dim, {rows, dim});
    }
    p += n;
  };
  per_layer("input_layernorm.weight", {dim});
  per_layer_permuted("self_attn.q_proj.weight", heads);
  per_layer_permuted("self_attn.k_proj.weight", kv_heads);
  per_layer("self_attn.v_proj.weight", {kv_dim, dim});
  per_layer("self_attn.o_proj.weight", {dim, dim});
  per_layer("post_attention_layernorm.weight", {dim});
  per_layer("mlp.gate_proj.weight", {hd, dim});   // w1
  per_layer("mlp.down_proj.weight", {dim, hd});   // w2
  per_layer("mlp.up_proj.weight", {hd, dim});     // w3
  t["model.norm.weight"] = view(p, {dim});
  p += dim + rope_tables;  // skip the legacy freq_cis_real / freq_cis_imag tables
  if (!c.tie_word_embeddings) t["lm_head.weight"] = view(p, {vocab, dim});

  model->check_required_tensors(bin_path);
  model->tokenizer_path_ = find_tokenizer(fs::path(bin_path));
  return model;
}

}  // namespace flashserve
