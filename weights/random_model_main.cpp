// flashserve-random-model: writes a random-weight Llama folder (config.json + safetensors) of a
// real model's shape, for benchmarks and for comparisons with HF transformers on the GPU machine.
//   flashserve-random-model --out DIR [--preset NAME] [--dtype bf16] [--seed 1] [--shards 1]
//                           [--scale 0.02] [--tokenizer FILE] [--config-only 1]
// Presets: tiny, tinyllama-1.1b, llama2-7b, llama3.2-1b, llama3.2-1b-v128k (see preset()).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "weights/hf_config.h"
#include "weights/random_model.h"

namespace {

flashserve::ModelConfig preset(const std::string& name) {
  flashserve::ModelConfig c;
  // hidden, intermediate, layers, q heads, kv heads, head_dim, vocab, max positions
  auto set = [&](int h, int i, int l, int q, int kv, int hd, int v, int pos) {
    c.hidden_size = h, c.intermediate_size = i, c.num_layers = l, c.num_q_heads = q;
    c.num_kv_heads = kv, c.head_dim = hd, c.vocab_size = v, c.max_position_embeddings = pos;
  };
  if (name == "tiny") set(256, 688, 2, 4, 2, 64, 32000, 2048);
  else if (name == "tinyllama-1.1b") set(2048, 5632, 22, 32, 4, 64, 32000, 2048);
  else if (name == "llama2-7b") set(4096, 11008, 32, 32, 32, 128, 32000, 4096);
  else if (name == "llama3.2-1b" || name == "llama3.2-1b-v128k") {
    // Llama-3.2-1B's shape with its RoPE (theta 500000, llama3 scaling) and tied embeddings.
    // Its real vocabulary is 128256, but the only tokenizer we have is Llama 2's (32000 pieces):
    // "llama3.2-1b" uses vocab 32000 so that any sampled id detokenizes (text works end to end);
    // "-v128k" keeps the real 128256 rows (a 4x larger tied head) for token-id benchmarks only.
    // max positions 8192 (not 131072) keeps the default KV sizing of test runs modest.
    set(2048, 8192, 16, 32, 8, 64, name == "llama3.2-1b" ? 32000 : 128256, 8192);
    c.rope_theta = 500000.f;
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 32.f;
    c.rope_scaling.low_freq_factor = 1.f;
    c.rope_scaling.high_freq_factor = 4.f;
    c.rope_scaling.original_max_position_embeddings = 8192;
    c.tie_word_embeddings = true;
  } else {
    FS_THROW("unknown preset '", name,
             "' (tiny, tinyllama-1.1b, llama2-7b, llama3.2-1b, llama3.2-1b-v128k)");
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, preset_name = "tiny", dtype = "bf16", tokenizer;
  uint64_t seed = 1;
  int shards = 1;
  float scale = 0.02f;
  bool config_only = false;  // write config.json (+ tokenizer) only: HF tools fill in weights
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--out") out = value;
    else if (flag == "--preset") preset_name = value;
    else if (flag == "--dtype") dtype = value;
    else if (flag == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--shards") shards = std::atoi(value.c_str());
    else if (flag == "--scale") scale = std::strtof(value.c_str(), nullptr);
    else if (flag == "--tokenizer") tokenizer = value;
    else if (flag == "--config-only") config_only = value == "1" || value == "true";
    else return std::fprintf(stderr, "unknown flag %s\n", flag.c_str()), 2;
  }
  if (out.empty() || argc % 2 == 0) {
    std::fprintf(stderr, "usage: %s --out DIR [--preset NAME] "
                 "[--dtype f32|f16|bf16] [--seed N] [--shards N] [--scale X] [--tokenizer FILE]\n"
                 "       [--config-only 1]   presets: tiny, tinyllama-1.1b, llama2-7b, "
                 "llama3.2-1b, llama3.2-1b-v128k\n",
                 argv[0]);
    return 2;
  }
  try {
    const flashserve::DType t = dtype == "f32"   ? flashserve::DType::kF32
                                : dtype == "f16" ? flashserve::DType::kF16
                                : dtype == "bf16" ? flashserve::DType::kBF16
                                                  : throw flashserve::Error("bad --dtype " + dtype);
    const flashserve::ModelConfig config = preset(preset_name);
    if (config_only) {
      std::filesystem::create_directories(out);
      std::ofstream f(std::filesystem::path(out) / "config.json");
      f << flashserve::hf_config_json(config);
      if (!f) throw flashserve::Error(out + "/config.json: write failed");
    } else {
      flashserve::write_random_hf_model(out, config, seed, t, shards, scale);
    }
    if (!tokenizer.empty())
      std::filesystem::copy_file(tokenizer, std::filesystem::path(out) / "tokenizer.model",
                                 std::filesystem::copy_options::overwrite_existing);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
