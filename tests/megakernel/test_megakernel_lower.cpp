// The lowering of decode steps (megakernel/lower.h) on the published shapes the megakernel
// targets and on stories260K's: every wait is met by earlier instructions exactly, no SM count
// 1..132 deadlocks, every weight row is streamed once per step, and SMs stream about the same
// bytes (kBalance).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "megakernel/lower.h"
#include "megakernel/schedule.h"

namespace flashserve {
namespace {

// Max over SMs of the bytes an SM streams, over the mean, on the 1B-7B shapes at 132 SMs: each
// stage's tiles differ by at most one row and go to the SMs that have streamed least.
constexpr double kBalance = 1.01;

ModelConfig shape(int layers, int hidden, int inter, int hq, int hkv, int d, int vocab, bool tied,
                  bool qk_norm = false) {
  ModelConfig c;
  c.num_layers = layers, c.hidden_size = hidden, c.intermediate_size = inter;
  c.num_q_heads = hq, c.num_kv_heads = hkv, c.head_dim = d, c.vocab_size = vocab;
  c.tie_word_embeddings = tied, c.qk_norm = qk_norm;
  return c;
}
ModelConfig tinyllama() { return shape(22, 2048, 5632, 32, 4, 64, 32000, false); }
ModelConfig llama32_1b() { return shape(16, 2048, 8192, 32, 8, 64, 128256, true); }
ModelConfig qwen3_06b() { return shape(28, 1024, 3072, 16, 8, 128, 151936, true, true); }
ModelConfig llama2_7b() { return shape(32, 4096, 11008, 32, 32, 128, 32000, false); }
ModelConfig stories260k() { return shape(5, 64, 172, 8, 4, 8, 512, true); }

// Every check that does not depend on the SM count being large.
void check_program(const MegaProgram& p) {
  // Topological order: a wait needs exactly the bumps of instructions before it, and no
  // instruction after it bumps that counter. A kAttention group bumps once.
  std::map<int, double> bumps_before;
  std::map<int, double> total;
  for (const MegaInstr& in : p.instrs)
    if (in.bump_counter >= 0) total[in.bump_counter] += in.arrive_counter >= 0 ? 1.0 / in.arrive_count : 1.0;
  for (const MegaInstr& in : p.instrs) {
    if (in.wait_counter >= 0) {
      EXPECT_NEAR(bumps_before[in.wait_counter], in.wait_count, 1e-9)
          << mega_op_name(MegaOp(in.op)) << " layer " << in.layer;
      EXPECT_NEAR(total[in.wait_counter], in.wait_count, 1e-9);
    }
    if (in.bump_counter >= 0)
      bumps_before[in.bump_counter] += in.arrive_counter >= 0 ? 1.0 / in.arrive_count : 1.0;
  }
  // Each queue runs in the topological order; every instruction is on exactly one queue.
  std::vector<int> seen(p.instrs.size(), 0);
  for (const auto& q : p.queues) {
    EXPECT_TRUE(std::is_sorted(q.begin(), q.end()));
    for (int i : q) ++seen[size_t(i)];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
  // Every weight row once: the tiles of each (op, layer) cover [0, rows) without overlap.
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> tiles;
  for (const MegaInstr& in : p.instrs)
    if (mega_weight_bytes(p.dims, in) > 0) tiles[{in.op, in.layer}].push_back({in.begin, in.end});
  EXPECT_EQ(tiles.size(), size_t(4 * p.dims.num_layers + 1));
  for (auto& [key, v] : tiles) {
    std::sort(v.begin(), v.end());
    int64_t next = 0;
    for (auto [b, e] : v) {
      EXPECT_EQ(b, next);
      EXPECT_GT(e, b);
      EXPECT_LE((e - b) * mega_weight_shape(p.dims, MegaOp(key.first)).rows_per_unit,
                kMegaMaxTileRows);
      next = e;
    }
    EXPECT_EQ(next, mega_weight_shape(p.dims, MegaOp(key.first)).rows);
  }
  // Attention: every (sequence, kv head, split) once.
  std::set<std::tuple<int, int, int, int>> attn;
  for (const MegaInstr& in : p.instrs)
    if (MegaOp(in.op) == MegaOp::kAttention) attn.insert({in.layer, in.seq, in.kv_head, in.split});
  EXPECT_EQ(attn.size(),
            size_t(p.dims.num_layers) * p.dims.batch * p.dims.num_kv_heads * p.dims.num_splits);
  // No deadlock: the queues run to the end under the counter protocol.
  size_t ran = 0;
  run_queues(p, [&](const MegaInstr&, bool) { ++ran; });
  EXPECT_EQ(ran, p.instrs.size());
}

double balance(const MegaProgram& p) {
  std::vector<int64_t> bytes(size_t(p.num_sms), 0);
  int64_t sum = 0;
  for (size_t sm = 0; sm < p.queues.size(); ++sm)
    for (int i : p.queues[sm]) bytes[sm] += mega_weight_bytes(p.dims, p.instrs[size_t(i)]);
  for (int64_t b : bytes) sum += b;
  return double(*std::max_element(bytes.begin(), bytes.end())) / (double(sum) / p.num_sms);
}

TEST(MegakernelLower, EverySmCountRunsToTheEnd) {
  for (const ModelConfig& c : {stories260k(), tinyllama()})
    for (int batch : {1, 5})
      for (int sms = 1; sms <= 132; ++sms) {
        SCOPED_TRACE("sms " + std::to_string(sms) + " batch " + std::to_string(batch));
        check_program(lower_decode_step(c, batch, sms));
      }
}

TEST(MegakernelLower, TargetShapesAtEveryBatch) {
  for (const ModelConfig& c : {tinyllama(), llama32_1b(), qwen3_06b(), llama2_7b()})
    for (int batch : {1, 2, 5, 8})
      for (int sms : {1, 78, 114, 132}) {
        SCOPED_TRACE("hidden " + std::to_string(c.hidden_size) + " batch " +
                     std::to_string(batch) + " sms " + std::to_string(sms));
        const MegaProgram p = lower_decode_step(c, batch, sms);
        check_program(p);
        EXPECT_LE(balance(p), kBalance);
      }
}

TEST(MegakernelLower, TilesOfAStageDifferByOneRow) {
  const MegaProgram p = lower_decode_step(tinyllama(), 1, 132);
  std::map<std::pair<int, int>, std::pair<int, int>> range;  // (op, layer) -> min, max rows
  for (const MegaInstr& in : p.instrs) {
    if (mega_weight_bytes(p.dims, in) == 0) continue;
    auto [it, fresh] = range.insert({{in.op, in.layer}, {in.end - in.begin, in.end - in.begin}});
    it->second.first = std::min(it->second.first, in.end - in.begin);
    it->second.second = std::max(it->second.second, in.end - in.begin);
  }
  for (const auto& [key, mm] : range) EXPECT_LE(mm.second - mm.first, 1);
}

TEST(MegakernelLower, RefusesWhatTheKernelDoesNotRun) {
  ModelConfig c = tinyllama();
  EXPECT_EQ(megakernel_unsupported(c, 1), "");
  EXPECT_NE(megakernel_unsupported(c, 2), "");
  c.quant_method = "fp8";
  EXPECT_NE(megakernel_unsupported(c, 1), "");
  c = tinyllama();
  c.layer_windows.assign(22, 4096);
  EXPECT_NE(megakernel_unsupported(c, 1), "");
  c = tinyllama();
  c.head_dim = 256;
  EXPECT_NE(megakernel_unsupported(c, 1), "");
  c = tinyllama();
  c.attn_logit_softcapping = 50.f;
  EXPECT_NE(megakernel_unsupported(c, 1), "");
  EXPECT_THROW(lower_decode_step(tinyllama(), 9, 132), Error);
  EXPECT_THROW(lower_decode_step(c, 1, 132), Error);
}

}  // namespace
}  // namespace flashserve
