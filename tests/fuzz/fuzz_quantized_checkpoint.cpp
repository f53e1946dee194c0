// Fuzzes the quantized-checkpoint readers (weights/int4_weights.cpp, block_fp8_weights.cpp,
// quantized_projections.cpp): the first byte picks a config.json (the committed one-layer
// checkpoints' of tests/weights/data/quantized/, and a block-wise FP8 model small enough that its
// whole file fits libFuzzer's max_len), the rest is its model.safetensors. Any input either
// loads, every int4 or block-FP8 projection then packed with finite values (block-FP8: no NaN
// code, finite scales >= 0), or throws flashserve::Error.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "tests/fuzz/fuzz_file.h"
#include "weights/block_fp8_weights.h"
#include "weights/llama_tensors.h"
#include "weights/loaded_model.h"
#include "weights/packed_views.h"
#include "weights/quant_config.h"

using namespace flashserve;

namespace {

// Hidden 16, intermediate 24 (partial 16x16 blocks): its seed is about 4 KB
// (corpus/fuzz_quantized_checkpoint/seed_block_fp8_tiny).
const char* const kTinyBlockFp8Config = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
  "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 1,
  "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 8,
  "max_position_embeddings": 32, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
  "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                          "weight_block_size": [16, 16], "modules_to_not_convert": ["lm_head"]}
})";

struct Format {
  const char* folder;
  const char* config;  // null: the committed checkpoint's config.json
};
const Format kFormats[] = {{"gptq_asym_actorder", nullptr}, {"awq", nullptr},
                           {"ct_group_asym", nullptr},      {"block_fp8", nullptr},
                           {"block_fp8_tiny", kTinyBlockFp8Config}};

// A scratch folder per format holding that format's config.json, made once.
std::string folder(size_t i) {
  namespace fs = std::filesystem;
  static std::string root;
  if (root.empty()) {
    const uint8_t none = 0;
    root = fuzz::write_scratch("quant", "_dir", &none, 0) + ".d";
    for (const Format& f : kFormats) {
      const std::string dir = root + "/" + f.folder;
      fs::create_directories(dir);
      if (f.config)
        std::ofstream(dir + "/config.json") << f.config;
      else
        fs::copy_file(std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/" + f.folder +
                          "/config.json",
                      dir + "/config.json", fs::copy_options::overwrite_existing);
    }
    std::atexit([] { fs::remove_all(root); });
  }
  return root + "/" + kFormats[i].folder;
}

// What the block-FP8 reader promises of a packed projection: the checks it makes at load.
void check_block_fp8(const TensorView& t) {
  const BlockFp8Weight& w = *t.block_fp8;
  FUZZ_ASSERT(t.data == nullptr && t.shape == (std::vector<int64_t>{w.rows, w.cols}),
              "a block-FP8 view and its packed form disagree");
  FUZZ_ASSERT(int64_t(w.scales.size()) == w.scale_rows() * w.scale_cols(), "scale count");
  for (float s : w.scales) FUZZ_ASSERT(std::isfinite(s) && s >= 0.f, "a bad block scale");
  for (int64_t i = 0; i < w.rows * w.cols; ++i)
    FUZZ_ASSERT((w.codes[i] & 0x7F) != 0x7F, "an E4M3 NaN code");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string dir = folder(data[0] % std::size(kFormats));
  {
    std::ofstream out(dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  }
  try {
    auto model = load_model(dir);
    const QuantConfig& q = model->config().quant;
    for (const auto& [name, shape] : llama_tensor_shapes(model->config())) {
      const TensorView& t = model->tensor(name);
      FUZZ_ASSERT(t.shape == shape, "shape");
      // Int4 projections are always packed and block-FP8 ones stored as F8_E4M3 too, with finite
      // values; others (and block-FP8 projections kept in bf16) are as stored, NaNs included.
      if (!stores_quantized(q, name)) continue;
      if (q.is_int4()) FUZZ_ASSERT(t.dtype == DType::kI4 && t.int4, "an int4 projection not packed");
      if (q.format == QuantFormat::kBlockFp8) {
        FUZZ_ASSERT(t.block_fp8 || t.dtype != DType::kF8E4M3, "a block-FP8 projection not packed");
        if (t.block_fp8) check_block_fp8(t);
      }
      if (!is_packed(t)) continue;
      std::vector<float> values;
      const TensorView f = unpacked_view(t, &values);
      const float* v = static_cast<const float*>(f.data);
      for (int64_t i = 0; i < f.numel(); ++i) FUZZ_ASSERT(std::isfinite(v[i]), "non-finite weight");
    }
  } catch (const Error&) {
  }
  return 0;
}
