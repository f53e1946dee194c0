// flashserve-random-model: writes a random-weight Llama folder (config.json + safetensors) of a
// real model's shape, for benchmarks and for comparisons with HF transformers on the GPU machine.
//   flashserve-random-model --out DIR [--preset tiny|tinyllama-1.1b|llama2-7b] [--dtype bf16]
//                           [--seed 1] [--shards 1] [--scale 0.02] [--tokenizer FILE]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
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
  else FS_THROW("unknown preset '", name, "' (tiny, tinyllama-1.1b, llama2-7b)");
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, preset_name = "tiny", dtype = "bf16", tokenizer;
  uint64_t seed = 1;
  int shards = 1;
  float scale = 0.02f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--out") out = value;
    else if (flag == "--preset") preset_name = value;
    else if (flag == "--dtype") dtype = value;
    else if (flag == "--seed") seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--shards") shards = std::atoi(value.c_str());
    else if (flag == "--scale") scale = std::strtof(value.c_str(), nullptr);
    else if (flag == "--tokenizer") tokenizer = value;
    else return std::fprintf(stderr, "unknown flag %s\n", flag.c_str()), 2;
  }
  if (out.empty() || argc % 2 == 0) {
    std::fprintf(stderr, "usage: %s --out DIR [--preset tiny|tinyllama-1.1b|llama2-7b] "
                 "[--dtype f32|f16|bf16] [--seed N] [--shards N] [--scale X] [--tokenizer FILE]\n",
                 argv[0]);
    return 2;
  }
  try {
    const flashserve::DType t = dtype == "f32"   ? flashserve::DType::kF32
                                : dtype == "f16" ? flashserve::DType::kF16
                                : dtype == "bf16" ? flashserve::DType::kBF16
                                                  : throw flashserve::Error("bad --dtype " + dtype);
    flashserve::write_random_hf_model(out, preset(preset_name), seed, t, shards, scale);
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
