// lower_decode_step: a decode step as stages of tiled instructions on per-SM queues, and the
// support check that decides which models may run it.
#include "megakernel/lower.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace flashserve {

std::string megakernel_unsupported(const ModelConfig& c, int tensor_parallel_size) {
  if (!c.quant_method.empty()) return c.quant_method + " weights (bf16 only)";
  if (tensor_parallel_size > 1) return "tensor parallelism";
  for (int w : c.layer_windows)
    if (w > 0) return "sliding-window attention";
  if (c.attn_logit_softcapping > 0.f || c.final_logit_softcapping > 0.f) return "soft-caps";
  if (c.sandwich_norms || c.norm_weight_plus_one || c.gelu_mlp || c.scale_embeddings)
    return c.architecture + "'s norms/MLP";
  if (c.post_norms || c.qk_norm_full) return c.architecture + "'s post-norm layers";
  if (c.fused_projections || c.partial_rotary_factor != 1.f) return "partial rotary (Phi3)";
  if (!c.rope_layers.empty() || c.rope_local_theta > 0.f) return "per-layer RoPE tables";
  const std::string& rope = c.rope_scaling.type;
  if (rope != "none" && rope != "llama3" && rope != "linear" && rope != "dynamic")
    return rope + " RoPE scaling";
  if (c.embedding_multiplier != 1.f || c.residual_multiplier != 1.f ||
      c.attention_multiplier != 0.f || c.logits_scaling != 1.f || c.query_pre_attn_scalar != 0.f)
    return "Granite/Gemma scalings";
  if (c.head_dim > kMegaMaxHeadDim || c.head_dim % 8 != 0)
    return "head_dim " + std::to_string(c.head_dim) + " (multiples of 8 up to 128)";
  if (c.num_kv_heads <= 0 || c.num_q_heads % c.num_kv_heads != 0 ||
      c.num_q_heads / c.num_kv_heads * c.head_dim > kMegaMaxGroupDims)
    return "query groups wider than " + std::to_string(kMegaMaxGroupDims) + " dims";
  if (c.hidden_size % 2 != 0 || c.intermediate_size % 2 != 0)
    return "odd hidden or intermediate size";
  return "";
}

namespace {

// Cuts `rows` weight rows into tiles of at most kMegaMaxTileRows / rows_per_unit rows: one per
// SM, or a multiple of the SM count when the rows need more, or one per row when fewer.
std::vector<std::pair<int, int>> cut_rows(int64_t rows, int64_t rows_per_unit, int num_sms) {
  const int64_t cap = kMegaMaxTileRows / rows_per_unit;
  int64_t tiles = std::max<int64_t>(num_sms, (rows + cap - 1) / cap);
  tiles = (tiles + num_sms - 1) / num_sms * num_sms;
  tiles = std::min(tiles, rows);
  std::vector<std::pair<int, int>> out;
  for (int64_t t = 0; t < tiles; ++t)
    out.emplace_back(int(t * rows / tiles), int((t + 1) * rows / tiles));
  return out;
}

struct Lowerer {
  MegaProgram p;
  std::vector<int64_t> load;  // [num_sms] weight bytes placed so far
  int next_free = 0;          // round-robin cursor for instructions without weights

  // Appends one stage. Weight tiles go to the SMs with the fewest bytes so far (ties: lower
  // id), the largest tile first; the others round-robin.
  void place(std::vector<MegaInstr> stage) {
    const int n = p.num_sms;
    std::vector<int> order(size_t(n), 0);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return load[size_t(a)] < load[size_t(b)]; });
    std::stable_sort(stage.begin(), stage.end(), [&](const MegaInstr& a, const MegaInstr& b) {
      return mega_weight_bytes(p.dims, a) > mega_weight_bytes(p.dims, b);
    });
    for (size_t i = 0; i < stage.size(); ++i) {
      const int64_t bytes = mega_weight_bytes(p.dims, stage[i]);
      const int sm = bytes > 0 ? order[i % size_t(n)] : next_free++ % n;
      load[size_t(sm)] += bytes;
      p.queues[size_t(sm)].push_back(int(p.instrs.size()));
      p.instrs.push_back(stage[i]);
    }
  }

  // The tiles of `op` in `layer`, waiting on (counter, count) and bumping `bump`.
  std::vector<MegaInstr> tiles(MegaOp op, int layer, MegaBuf in, MegaBuf out, int wait,
                               int count, int bump) const {
    const MegaWeightShape s = mega_weight_shape(p.dims, op);
    std::vector<MegaInstr> v;
    for (auto [b, e] : cut_rows(s.rows, s.rows_per_unit, p.num_sms)) {
      MegaInstr in_ = {};
      in_.op = int32_t(op), in_.layer = layer, in_.begin = b, in_.end = e;
      in_.in_buf = int32_t(in), in_.out_buf = int32_t(out);
      in_.wait_counter = wait, in_.wait_count = count, in_.bump_counter = bump;
      in_.arrive_counter = -1;
      v.push_back(in_);
    }
    return v;
  }
};

}  // namespace

MegaProgram lower_decode_step(const ModelConfig& c, int batch, int num_sms) {
  const std::string why = megakernel_unsupported(c, 1);
  FS_CHECK(why.empty(), "megakernel: ", why);
  FS_CHECK(batch >= 1 && batch <= kMegaMaxBatch, "megakernel: batch ", batch, " (1..",
           kMegaMaxBatch, ")");
  FS_CHECK(num_sms >= 1, "megakernel: ", num_sms, " SMs");
  Lowerer w;
  MegaProgram& p = w.p;
  p.num_sms = num_sms;
  p.queues.resize(size_t(num_sms));
  w.load.assign(size_t(num_sms), 0);
  MegaDims& d = p.dims;
  d.num_layers = c.num_layers, d.hidden = c.hidden_size, d.intermediate = c.intermediate_size;
  d.vocab = c.vocab_size, d.num_q_heads = c.num_q_heads, d.num_kv_heads = c.num_kv_heads;
  d.head_dim = c.head_dim, d.batch = batch;
  d.qk_norm = c.qk_norm, d.qkv_bias = c.qkv_bias, d.eps = c.rms_norm_eps;
  d.attention_scale = float(1.0 / std::sqrt(double(c.head_dim)));
  // Enough splits that the attention stage has about one instruction per SM.
  d.num_splits = std::clamp(num_sms / (batch * c.num_kv_heads), 1, kMegaMaxSplits);

  // Counters: 0 embed; per layer 5 (qkv, attn, o, gate_up, down); then the attention groups'
  // arrival counters [num_layers, batch, num_kv_heads].
  const int L = c.num_layers, hkv = c.num_kv_heads;
  auto stage = [](int layer, int k) { return 1 + 5 * layer + k; };
  const int arrive0 = 1 + 5 * L;
  p.num_counters = arrive0 + L * batch * hkv;

  std::vector<MegaInstr> embed;
  for (int b = 0; b < batch; ++b) {
    MegaInstr in = {};
    in.op = int32_t(MegaOp::kEmbed), in.begin = b, in.end = b + 1;
    in.out_buf = int32_t(MegaBuf::kX), in.bump_counter = 0, in.arrive_counter = -1;
    in.wait_counter = -1;
    embed.push_back(in);
  }
  w.place(embed);
  int prev = 0, prev_count = batch;  // what the next layer's qkv waits on
  for (int l = 0; l < L; ++l) {
    std::vector<MegaInstr> qkv =
        w.tiles(MegaOp::kQkv, l, MegaBuf::kX, MegaBuf::kQkv, prev, prev_count, stage(l, 0));
    const int n_qkv = int(qkv.size());
    w.place(std::move(qkv));
    std::vector<MegaInstr> attn;
    for (int b = 0; b < batch; ++b)
      for (int g = 0; g < hkv; ++g)
        for (int s = 0; s < d.num_splits; ++s) {
          MegaInstr in = {};
          in.op = int32_t(MegaOp::kAttention), in.layer = l;
          in.seq = b, in.kv_head = g, in.split = s;
          in.in_buf = int32_t(MegaBuf::kQkv), in.out_buf = int32_t(MegaBuf::kAttn);
          in.wait_counter = stage(l, 0), in.wait_count = n_qkv, in.bump_counter = stage(l, 1);
          in.arrive_counter = arrive0 + (l * batch + b) * hkv + g;
          in.arrive_count = d.num_splits;
          attn.push_back(in);
        }
    w.place(std::move(attn));
    std::vector<MegaInstr> o = w.tiles(MegaOp::kOProj, l, MegaBuf::kAttn, MegaBuf::kX,
                                       stage(l, 1), batch * hkv, stage(l, 2));
    const int n_o = int(o.size());
    w.place(std::move(o));
    std::vector<MegaInstr> gu =
        w.tiles(MegaOp::kGateUp, l, MegaBuf::kX, MegaBuf::kAct, stage(l, 2), n_o, stage(l, 3));
    const int n_gu = int(gu.size());
    w.place(std::move(gu));
    std::vector<MegaInstr> down =
        w.tiles(MegaOp::kDown, l, MegaBuf::kAct, MegaBuf::kX, stage(l, 3), n_gu, stage(l, 4));
    prev = stage(l, 4), prev_count = int(down.size());
    w.place(std::move(down));
  }
  w.place(w.tiles(MegaOp::kLmHead, 0, MegaBuf::kX, MegaBuf::kLogits, prev, prev_count, -1));
  return p;
}

}  // namespace flashserve
