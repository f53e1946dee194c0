// The megakernel's CPU twin (megakernel/interpreter.h) runs lowered decode steps over a paged f32
// KV cache; its logits must equal the CPU model forward's (every position of each sequence
// prefilled whole) within kTol, on stories260K and on random Qwen2 (q/k/v biases) and Qwen3
// (q/k norms) shapes, with sequences that start at different steps (so batch sizes and
// positions vary) and several SM counts (so the schedule differs).
#include <gtest/gtest.h>

#include <cmath>

#include "megakernel/interpreter.h"
#include "megakernel/lower.h"
#include "model/rope_tables.h"
#include "tests/model/model_test_util.h"
#include "weights/fp8_weights.h"

namespace flashserve::test {
namespace {

// Relative to the largest reference logit of the row: the f32 sums run in another order (norms
// folded into the projections, split softmax) than the CPU backend's.
constexpr double kTol = 1e-4;

// The model's weights as f32 host arrays in the interpreter's layout (q/k/v and gate/up stacked).
struct CpuWeights {
  std::vector<std::vector<float>> store;
  MegaCpuModel model;
  std::vector<std::vector<float>> k_cache, v_cache;

  const float* keep(std::vector<float> v) {
    store.push_back(std::move(v));
    return store.back().data();
  }
  const float* get(const LoadedModel& m, const std::vector<std::string>& names) {
    std::vector<float> all;
    for (const std::string& n : names) {
      const std::vector<float> v = weight_values(m.tensor(n));
      all.insert(all.end(), v.begin(), v.end());
    }
    return keep(std::move(all));
  }
  CpuWeights(const LoadedModel& m, int num_blocks, int block_size) {
    const ModelConfig& c = m.config();
    store.reserve(size_t(16 * c.num_layers + 8));
    model.embed = get(m, {"model.embed_tokens.weight"});
    model.final_norm = get(m, {"model.norm.weight"});
    model.lm_head = m.has_tensor("lm_head.weight") ? get(m, {"lm_head.weight"}) : model.embed;
    model.inv_freq = keep(rope_inv_freq(c));
    const size_t cache = size_t(num_blocks) * block_size * c.num_kv_heads * c.head_dim;
    k_cache.assign(size_t(c.num_layers), std::vector<float>(cache, NAN));
    v_cache.assign(size_t(c.num_layers), std::vector<float>(cache, NAN));
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      MegaCpuLayer L;
      L.input_norm = get(m, {p + "input_layernorm.weight"});
      const std::string a = p + "self_attn.";
      L.wqkv = get(m, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"});
      if (c.qkv_bias) L.bqkv = get(m, {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"});
      if (c.qk_norm) L.q_norm = get(m, {a + "q_norm.weight"}), L.k_norm = get(m, {a + "k_norm.weight"});
      L.wo = get(m, {a + "o_proj.weight"});
      L.post_norm = get(m, {p + "post_attention_layernorm.weight"});
      L.w_gate_up = get(m, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
      L.w_down = get(m, {p + "mlp.down_proj.weight"});
      L.k_cache = k_cache[size_t(l)].data();
      L.v_cache = v_cache[size_t(l)].data();
      model.layers.push_back(L);
    }
  }
};

// Sequence b has 9 + 3b tokens and starts at step b; every step decodes one token of each
// running sequence through the interpreter. Each logit row must match the CPU prefill's.
void check_against_forward(const LoadedModel& m, int num_seqs, int num_sms) {
  const ModelConfig& c = m.config();
  constexpr int kBlockSize = 4, kBlocks = 256;
  CpuWeights w(m, kBlocks, kBlockSize);
  BlockPool pool(kBlocks, 17);
  std::vector<TestSeq> seqs(static_cast<size_t>(num_seqs));
  std::vector<std::vector<float>> want(static_cast<size_t>(num_seqs));
  for (int b = 0; b < num_seqs; ++b) {
    seqs[size_t(b)].tokens = random_tokens(9 + 3 * b, c.vocab_size, 40 + uint32_t(b));
    want[size_t(b)] = prefill_logits(m, seqs[size_t(b)].tokens);
  }
  double worst = 0;
  for (int step = 0;; ++step) {
    std::vector<int> running;
    for (int b = 0; b < num_seqs; ++b)
      if (step >= b && seqs[size_t(b)].num_cached < int(seqs[size_t(b)].tokens.size()))
        running.push_back(b);
    if (running.empty() && step >= num_seqs) break;
    if (running.empty()) continue;
    StepPlan plan;
    for (int b : running)
      plan.chunks.push_back(seqs[size_t(b)].chunk(1, kBlockSize, pool, LogitsWanted::kLast));
    plan.lay_out(kBlockSize, kBlocks, c.vocab_size);
    const MegaProgram p = lower_decode_step(c, int(running.size()), num_sms);
    MegaCpuStep s;
    s.tokens = plan.tokens.data(), s.positions = plan.positions.data();
    s.slots = plan.slot_mapping.data(), s.kv_lens = plan.kv_lens.data();
    s.block_table = plan.block_table.data();
    s.max_blocks_per_seq = plan.max_blocks_per_seq, s.block_size = kBlockSize;
    const std::vector<float> got = interpret_decode_step(p, w.model, s);
    for (size_t i = 0; i < running.size(); ++i) {
      const int b = running[i], pos = plan.positions[i];
      const size_t V = size_t(c.vocab_size);
      const std::vector<float> row(got.begin() + ptrdiff_t(i * V), got.begin() + ptrdiff_t((i + 1) * V));
      const std::vector<float> ref(want[size_t(b)].begin() + ptrdiff_t(pos * V),
                                   want[size_t(b)].begin() + ptrdiff_t((pos + 1) * V));
      const double err = max_rel_diff(row, ref);
      worst = std::max(worst, err);
      EXPECT_LE(err, kTol) << "sequence " << b << " position " << pos;
    }
  }
  ::testing::Test::RecordProperty("worst_rel_diff", std::to_string(worst));
}

TEST(MegakernelInterpreter, Stories260kMatchesTheCpuForward) {
  auto m = load_model(std::string(FS_MODELS_DIR) + "/stories260K");
  for (int sms : {1, 7, 132}) {
    SCOPED_TRACE("sms " + std::to_string(sms));
    check_against_forward(*m, 3, sms);
  }
}

TEST(MegakernelInterpreter, RandomQwenShapesMatchTheCpuForward) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"}) {
    SCOPED_TRACE(arch);
    ModelConfig c = small_config(256, 8, 2, 64, std::string(arch) != "LlamaForCausalLM");
    set_architecture(c, arch);
    const std::string dir = fresh_dir(arch);
    write_random_hf_model(dir, c, 7, DType::kF32, 1, 0.08f);
    auto m = load_model(dir);
    check_against_forward(*m, 5, 20);
  }
}

}  // namespace
}  // namespace flashserve::test
