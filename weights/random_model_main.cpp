// flashserve-random-model: writes a random-weight Llama-family folder (config.json + safetensors) of a
// real model's shape, for benchmarks and for comparisons with HF transformers on the GPU machine.
//   flashserve-random-model --out DIR [--preset NAME] [--dtype bf16] [--seed 1] [--shards 1]
//                           [--scale 0.02] [--tokenizer FILE] [--config-only 1] [--layers N]
//                           [--fp8-scale channel|tensor] [--vocab-size N]
// --dtype fp8 writes an FP8 checkpoint as Hugging Face stores one (docs/FP8.md): the layers'
// projections F8_E4M3 with a weight_scale each (per output channel, or per tensor), the rest bf16.
// Presets: tiny, tinyllama-1.1b, llama2-7b, llama2-70b, llama3.2-1b, llama3.2-1b-v128k, and of the other
// architectures qwen2.5-0.5b, qwen3-0.6b, mistral-7b, mistral-7b-v0.1, phi-4-mini, granite-3-2b,
// olmo-2-1b, smollm3-3b, qwen2.5-7b-yarn, gemma-2-2b, gemma-3-1b, and the mixtures of experts
// qwen3-30b-a3b, mixtral-8x7b, qwen1.5-moe-a2.7b, gpt-oss-20b and gpt-oss-120b (MXFP4
// experts, as the published checkpoints) and gpt-oss-tiny (see preset()).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/error.h"
#include "weights/attention_config.h"
#include "weights/hf_config.h"
#include "weights/random_model.h"

namespace {

constexpr const char* kPresets =
    "tiny, tinyllama-1.1b, llama2-7b, llama2-70b, llama3.2-1b, llama3.2-1b-v128k, qwen2.5-0.5b, qwen3-0.6b, "
    "mistral-7b, mistral-7b-v0.1, phi-4-mini, granite-3-2b, olmo-2-1b, smollm3-3b, "
    "qwen2.5-7b-yarn, gemma-2-2b, gemma-3-1b, qwen3-30b-a3b, mixtral-8x7b, qwen1.5-moe-a2.7b, "
    "gpt-oss-20b, gpt-oss-120b, gpt-oss-tiny";

flashserve::ModelConfig preset(const std::string& name) {
  flashserve::ModelConfig c;
  // hidden, intermediate, layers, q heads, kv heads, head_dim, vocab, max positions
  auto set = [&](int h, int i, int l, int q, int kv, int hd, int v, int pos) {
    c.hidden_size = h, c.intermediate_size = i, c.num_layers = l, c.num_q_heads = q;
    c.num_kv_heads = kv, c.head_dim = hd, c.vocab_size = v, c.max_model_len = pos;
  };
  if (name == "tiny") set(256, 688, 2, 4, 2, 64, 32000, 2048);
  else if (name == "tinyllama-1.1b") set(2048, 5632, 22, 32, 4, 64, 32000, 2048);
  else if (name == "llama2-7b") set(4096, 11008, 32, 32, 32, 128, 32000, 4096);
  else if (name == "llama2-70b") set(8192, 28672, 80, 64, 8, 128, 32000, 4096);  // 138 GB in bf16
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
  } else if (name == "qwen2.5-0.5b") {
    // Qwen2.5-0.5B's shape (q/k/v biases, tied head). Like llama3.2-1b: vocab 32000 (not 151936)
    // so that the Llama 2 tokenizer covers every id, 8192 positions (not 32768).
    set(896, 4864, 24, 14, 2, 64, 32000, 8192);
    set_architecture(c, "Qwen2ForCausalLM");
    c.rope_theta = 1e6f, c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = true;
  } else if (name == "qwen3-0.6b") {
    // Qwen3-0.6B's shape: head_dim 128 with hidden 1024 over 16 heads, q/k norms, tied head.
    set(1024, 3072, 28, 16, 8, 128, 32000, 8192);
    set_architecture(c, "Qwen3ForCausalLM");
    c.rope_theta = 1e6f, c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = true;
  } else if (name == "mistral-7b") {
    // Mistral-7B-v0.3's shape (no sliding window), vocab 32000 (not 32768).
    set(4096, 14336, 32, 32, 8, 128, 32000, 8192);
    set_architecture(c, "MistralForCausalLM");
    c.rope_theta = 1e6f;
  } else if (name == "mistral-7b-v0.1") {
    // Mistral-7B-v0.1's shape: a 4096-token window on every layer; 16384 positions (not 32768),
    // room for prompts of twice the window.
    set(4096, 14336, 32, 32, 8, 128, 32000, 16384);
    set_architecture(c, "MistralForCausalLM");
    set_sliding_layers(c, 4096, 0);
  } else if (name == "phi-4-mini") {
    // Phi-4-mini's shape: fused projections, 96 of 128 dims rotated, LongRoPE over an original
    // 4096-token context, tied head. Stand-in factor lists (not the published ones); 8192
    // positions, so the long factors are the ones served (model/rope_tables.h).
    set(3072, 8192, 32, 24, 8, 128, 32000, 8192);
    set_architecture(c, "Phi3ForCausalLM");
    c.partial_rotary_factor = 0.75f, c.tie_word_embeddings = true;
    c.rope_scaling.type = "longrope";
    c.rope_scaling.original_max_position_embeddings = 4096;
    c.rope_scaling.factor = 2.f;
    for (int i = 0; i < 48; ++i) {
      c.rope_scaling.short_factor.push_back(1.f + 0.01f * float(i));
      c.rope_scaling.long_factor.push_back(1.f + 0.25f * float(i));
    }
  } else if (name == "granite-3-2b") {
    // Granite-3.0-2B's shape and multipliers, tied head.
    set(2048, 8192, 40, 32, 8, 64, 32000, 4096);
    set_architecture(c, "GraniteForCausalLM");
    c.embedding_multiplier = 12.f, c.residual_multiplier = 0.22f;
    c.attention_multiplier = 0.015625f, c.logits_scaling = 8.f, c.tie_word_embeddings = true;
  } else if (name == "olmo-2-1b") {
    // OLMo-2-0425-1B's shape: post-norms, q/k norms over the whole projections.
    set(2048, 8192, 16, 16, 16, 128, 32000, 4096);
    set_architecture(c, "Olmo2ForCausalLM");
    c.rope_theta = 500000.f, c.rms_norm_eps = 1e-6f;
  } else if (name == "smollm3-3b") {
    // SmolLM3-3B's shape: every fourth layer without RoPE, tied head.
    set(2048, 11008, 36, 16, 4, 128, 32000, 8192);
    set_architecture(c, "SmolLM3ForCausalLM");
    c.rope_theta = 5e6f, c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = true;
    for (int i = 0; i < c.num_layers; ++i) c.rope_layers.push_back((i + 1) % 4 != 0);
  } else if (name == "qwen2.5-7b-yarn") {
    // Qwen2.5-7B's shape with YaRN factor 4 over a 2048-token original context (the published
    // setting is 4 x 32768: a shorter original puts YaRN's ramp within prompts of a few thousand).
    set(3584, 18944, 28, 28, 4, 128, 32000, 8192);
    set_architecture(c, "Qwen2ForCausalLM");
    c.rope_theta = 1e6f, c.rms_norm_eps = 1e-6f;
    c.rope_scaling.type = "yarn";
    c.rope_scaling.factor = 4.f;
    c.rope_scaling.original_max_position_embeddings = 2048;
  } else if (name == "gemma-2-2b") {
    // Gemma-2-2B's shape with its real vocabulary (256000 rows: a token-id model, the Llama 2
    // tokenizer covers the first 32000): even layers windowed by 4096, soft-caps 50 and 30,
    // tied head. 16384 positions (not 8192): room for prompts of twice the window.
    set(2304, 9216, 26, 8, 4, 256, 256000, 16384);
    set_architecture(c, "Gemma2ForCausalLM");
    c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = true, c.bos_token_id = 2;
    c.eos_token_ids = {1};
    c.query_pre_attn_scalar = 256.f;
    c.attn_logit_softcapping = 50.f, c.final_logit_softcapping = 30.f;
    set_sliding_layers(c, 4096, 2);
  } else if (name == "gemma-3-1b") {
    // Gemma-3-1B's shape with its real vocabulary (262144 rows, as gemma-2-2b): five of every
    // six layers windowed by 512 and turned by the local RoPE base 10000, the sixth global
    // (base 1e6), per-head q/k norms, tied head; 8192 positions (not 32768).
    set(1152, 6912, 26, 4, 1, 256, 262144, 8192);
    set_architecture(c, "Gemma3ForCausalLM");
    c.rms_norm_eps = 1e-6f, c.tie_word_embeddings = true, c.bos_token_id = 2;
    c.eos_token_ids = {1};
    c.rope_theta = 1e6f, c.rope_local_theta = 1e4f, c.query_pre_attn_scalar = 256.f;
    set_sliding_layers(c, 512, 6);
  } else if (name == "qwen3-30b-a3b") {
    // Qwen3-30B-A3B's shape: 128 experts of 768 columns, top 8 renormalised, every layer
    // sparse, q/k norms, head_dim 128 over hidden 2048; vocab 32000 (not 151936) and 8192
    // positions (not 40960), as qwen3-0.6b.
    set(2048, 6144, 48, 32, 4, 128, 32000, 8192);
    set_architecture(c, "Qwen3MoeForCausalLM");
    c.rope_theta = 1e6f, c.rms_norm_eps = 1e-6f;
    c.moe = {.num_experts = 128, .top_k = 8, .intermediate = 768, .renormalize = true,
             .shared_intermediate = 0, .sparse_layers = std::vector<int>(48, 1)};
  } else if (name == "mixtral-8x7b") {
    // Mixtral-8x7B's shape: 8 experts of 14336 columns, top 2, no sliding window.
    set(4096, 14336, 32, 32, 8, 128, 32000, 8192);
    set_architecture(c, "MixtralForCausalLM");
    c.rope_theta = 1e6f;
    c.moe = {.num_experts = 8, .top_k = 2, .intermediate = 14336, .renormalize = true,
             .shared_intermediate = 0, .sparse_layers = std::vector<int>(32, 1)};
  } else if (name == "qwen1.5-moe-a2.7b") {
    // Qwen1.5-MoE-A2.7B's shape: 60 experts of 1408 columns, top 4 not renormalised, a shared
    // expert of 5632 with its sigmoid gate, q/k/v biases; vocab 32000 (not 151936).
    set(2048, 5632, 24, 16, 16, 128, 32000, 8192);
    set_architecture(c, "Qwen2MoeForCausalLM");
    c.rope_theta = 1e6f, c.rms_norm_eps = 1e-6f;
    c.moe = {.num_experts = 60, .top_k = 4, .intermediate = 1408, .renormalize = false,
             .shared_intermediate = 5632, .sparse_layers = std::vector<int>(24, 1)};
  } else if (name == "gpt-oss-20b" || name == "gpt-oss-120b" || name == "gpt-oss-tiny") {
    // gpt-oss's shapes with its real vocabulary (o200k_harmony): 32 (20b) or 128 (120b) MXFP4
    // experts of 2880 columns, top 4, in 24 or 36 layers; head_dim 64 over hidden 2880; q/k/v/o
    // biases, attention sinks; every other layer windowed by 128 (the first is); YaRN factor 32
    // over 4096 positions (131072 served). gpt-oss-tiny: the same at a size the CPU backend runs
    // in tests (hidden 256, 2 layers of 8 experts of 128 columns, top 2), so that the gpt-oss
    // tokenizer and chat template serve it.
    const bool big = name == "gpt-oss-120b", tiny = name == "gpt-oss-tiny";
    const int layers = tiny ? 2 : big ? 36 : 24, hidden = tiny ? 256 : 2880, inter = tiny ? 128 : 2880;
    set(hidden, inter, layers, tiny ? 4 : 64, tiny ? 2 : 8, 64, 201088, 131072);
    set_architecture(c, "GptOssForCausalLM");
    c.rope_theta = 150000.f, c.rms_norm_eps = 1e-5f;
    c.bos_token_id = 199998, c.eos_token_ids = {200002};
    c.rope_scaling.type = "yarn";
    c.rope_scaling.factor = 32.f;
    c.rope_scaling.original_max_position_embeddings = 4096;
    c.rope_scaling.truncate = false;
    c.moe = {.num_experts = tiny ? 8 : big ? 128 : 32, .top_k = tiny ? 2 : 4, .intermediate = inter,
             .renormalize = true, .shared_intermediate = 0, .swiglu_limit = 7.f,
             .sparse_layers = std::vector<int>(size_t(layers), 1)};
    set_sliding_layers(c, 128, 2);
  } else {
    FS_THROW("unknown preset '", name, "' (", kPresets, ")");
  }
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, preset_name = "tiny", dtype = "bf16", tokenizer, fp8_scale = "channel";
  uint64_t seed = 1;
  int shards = 1;
  float scale = 0.02f;
  bool config_only = false;  // write config.json (+ tokenizer) only: HF tools fill in weights
  int layers = 0;            // 0: the preset's; else that many layers of the preset's shape
  int vocab_size = 0;        // 0: the preset's; else the embedding and lm_head rows
  CLI::App app{"Writes a random-weight Llama folder (config.json + safetensors) of a real model's shape.",
               "flashserve-random-model"};
  app.add_option("--out", out, "output folder")->required();
  app.add_option("--preset", preset_name, std::string("model shape: ") + kPresets)
      ->check(CLI::Validator(
          [](std::string& v) {
            try {
              preset(v);
              return std::string();
            } catch (const std::exception& e) {
              return std::string(e.what());
            }
          },
          "NAME"))
      ->capture_default_str();
  app.add_option("--dtype", dtype, "weight dtype (fp8: FP8 projections, the rest bf16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "fp8"}))
      ->capture_default_str();
  app.add_option("--fp8-scale", fp8_scale, "with --dtype fp8: one scale per output channel or per tensor")
      ->check(CLI::IsMember({"channel", "tensor"}))
      ->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--shards", shards, "safetensors files")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--scale", scale, "weights are uniform in [-scale, scale]")
      ->check(CLI::Range(0.0f, 100.0f))->capture_default_str();
  app.add_option("--tokenizer", tokenizer, "tokenizer.model to copy into the folder");
  app.add_option("--config-only", config_only, "1: write config.json only (HF tools fill in weights)");
  // A few layers of a large shape: every layer of a model is the same work, so per-layer
  // efficiency (bandwidth, collectives) is measured without writing 138 GB of a 70B's weights.
  app.add_option("--layers", layers, "number of layers (default: the preset's)")
      ->check(CLI::Range(1, 1000));
  // A larger vocabulary than the tokenizer's (e.g. 128256 with Llama 2's 32000 pieces) is for
  // token-id benchmarks: ids past the tokenizer's have no text.
  app.add_option("--vocab-size", vocab_size, "vocabulary size (default: the preset's)")
      ->check(CLI::Range(1, 1 << 20));
  if (const int rc = flashserve::cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    const flashserve::DType t = dtype == "f32"   ? flashserve::DType::kF32
                                : dtype == "f16" ? flashserve::DType::kF16
                                                 : flashserve::DType::kBF16;  // checked by --dtype
    const flashserve::Fp8Layout fp8 = dtype != "fp8"            ? flashserve::Fp8Layout::kNone
                                      : fp8_scale == "tensor" ? flashserve::Fp8Layout::kPerTensor
                                                              : flashserve::Fp8Layout::kPerChannel;
    flashserve::ModelConfig config = preset(preset_name);
    if (layers > 0) {  // the per-layer lists keep their pattern
      for (std::vector<int>* list :
           {&config.rope_layers, &config.layer_windows, &config.moe.sparse_layers})
        for (size_t i = list->size(); !list->empty() && i < size_t(layers); ++i)
          list->push_back((*list)[i % size_t(config.num_layers)]);
      config.num_layers = layers;
      if (!config.rope_layers.empty()) config.rope_layers.resize(size_t(layers));
      if (!config.layer_windows.empty()) config.layer_windows.resize(size_t(layers));
      if (!config.moe.sparse_layers.empty()) config.moe.sparse_layers.resize(size_t(layers));
    }
    if (vocab_size > 0) config.vocab_size = vocab_size;
    if (config_only) {
      std::filesystem::create_directories(out);
      std::ofstream f(std::filesystem::path(out) / "config.json");
      f << flashserve::hf_config_json(config);
      if (!f) throw flashserve::Error(out + "/config.json: write failed");
    } else {
      flashserve::write_random_hf_model(out, config, seed, t, shards, scale, fp8);
    }
    if (!tokenizer.empty())
      std::filesystem::copy_file(tokenizer, std::filesystem::path(out) / "tokenizer.model",
                                 std::filesystem::copy_options::overwrite_existing);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashserve-random-model: error: %s\n", e.what());
    return 1;
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}
