// Llama-family forward over Backend ops. Per layer (pre-norm residual blocks):
//   h = rms_norm(x); q,k,v = h·Wqᵀ (+ bq), h·Wkᵀ (+ bk), h·Wvᵀ (+ bv)   [biases: Qwen2, gpt-oss];
//   q, k = per-head rms_norm(q), rms_norm(k)                            [Qwen3];
//   rope(q, k) (the layer's table: zeros for NoPE layers); write k,v to their slots;
//   x += paged_attention(q)·Woᵀ (+ bo)   [gpt-oss: o bias; attention sinks, AttentionScoring];
//   h = rms_norm(x); x += (silu(h·Wgᵀ) * h·Wuᵀ)·Wdᵀ
//   (a mixture-of-experts layer: x += the routed experts' weighted sum, model/moe_layer.cpp)
// then logits = rms_norm(x[wanted rows])·Wlmᵀ (Wlm = embedding table when tied).
// Gemma 2/3 (sandwich_norms): x = embedding · sqrt(hidden); each block's output is RMSNormed
// before its residual add; GeGLU (gelu_tanh) replaces SwiGLU; every norm scales by 1 + w
// (folded at load); attention windows, scale and soft-cap per layer (model/layer_settings.cpp);
// logits soft-capped. Olmo2's post-norm layers: model/post_norm_layer.cpp.
// Constant factors are folded into the weights at load: Granite's embedding_multiplier (the
// embedding table; a tied head keeps its own copy), residual_multiplier (o_proj and down_proj rows)
// and 1 / logits_scaling (the head), and partial rotary's row order and attention factor (q/k
// rows). The softmax scale is attention_multiplier, query_pre_attn_scalar^-0.5 or 1/sqrt(head_dim),
// times YaRN's and LongRoPE's attention factor squared when every dim is rotated: those scale cos
// and sin, so q·k by the factor squared.
// Tensor parallelism changes only the sizes (a rank's heads and columns), the ·Woᵀ, ·Wdᵀ and
// ·Wlmᵀ products (model/llama_model_parallel.cpp) and which slices of the weights load.
// Fused: Wq/Wk/Wv and Wg/Wu are stacked at load (one GEMM each); the split, RoPE and the K/V
// write are one op; SwiGLU reads the fused gate/up output; each residual add and the norm after
// it go with the projection that reads them (add_rms_norm_matmul), so the residual stream
// alternates between two buffers (docs/DECODE.md).
#include "model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "model/decode_graphs.h"
#include "model/weight_rows.h"
#include "weights/fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/load_progress.h"
#include "weights/packed_views.h"

namespace flashserve {

LlamaModel::LlamaModel(Backend& backend, const LoadedModel& model, const TensorShard* shard)
    : backend_(backend), config_(model.config()) {
  const ModelConfig& c = config_;
  FS_CHECK(c.num_layers > 0 && c.hidden_size > 0 && c.num_q_heads > 0 && c.num_kv_heads > 0 &&
               c.num_q_heads % c.num_kv_heads == 0 && c.vocab_size > 0,
           "bad model config in ", model.path());
  if (shard) shard_ = *shard;
  hq_ = shard ? shard->plan.q_heads : c.num_q_heads;
  hkv_ = shard ? shard->plan.kv_heads : c.num_kv_heads;
  inter_ = shard ? shard->plan.inter : c.intermediate_size;
  vocab_ = shard ? shard->plan.vocab : c.vocab_size;
  k_slices_ = shard ? shard->plan.k_slices : row_parallel_slices(c, 1);
  moe_inter_ = shard ? shard->plan.moe_inter : c.moe.intermediate;
  shared_inter_ = shard ? shard->plan.shared_inter : c.moe.shared_intermediate;
  dense_mlp_ = false;
  for (int i = 0; i < c.num_layers; ++i) dense_mlp_ = dense_mlp_ || !c.moe.sparse(i);
  const std::string rank = shard ? " (rank " + std::to_string(shard->plan.rank) + ")" : "";
  LoadProgress progress("weights of " + model.path() + rank, c.num_layers);  // silent under 1 s
  FS_CHECK(!(shard && c.qk_norm_full), c.architecture, ": tensor parallelism is not supported "
           "(its q/k norms span every head)");
  FS_CHECK(!(shard && (c.o_bias || c.attention_sinks || c.moe.swiglu_limit > 0.f)),
           c.architecture, ": tensor parallelism is not supported (MXFP4 experts, sinks and "
           "o_proj biases are not cut by rank)");
  const std::string embed_name = "model.embed_tokens.weight";
  embed_ = load_scaled(model.tensor(embed_name), embed_name, c.embedding_multiplier);
  final_norm_ = load_norm(model, "model.norm.weight");
  const float head_factor = 1.f / c.logits_scaling;
  if (!c.tie_word_embeddings || model.has_tensor("lm_head.weight")) {
    lm_head_ = load_scaled(model.tensor("lm_head.weight"), "lm_head.weight", head_factor);
  } else if (shard_ || c.embedding_multiplier != 1.f || head_factor != 1.f) {
    // tied: this rank's rows of the embedding table, or the table as the head needs it
    lm_head_ = load_scaled(model.tensor(embed_name), "lm_head.weight", head_factor);
  }
  std::vector<int> qkv_order;
  std::vector<float> qkv_factor;
  partial_rotary_rows(c, hq_, hkv_, &qkv_order, &qkv_factor);
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer L;
    if (!c.post_norms) L.input_norm = load_norm(model, p + "input_layernorm.weight");
    L.wqkv = load_stacked(model, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                  p + "self_attn.v_proj.weight"}, qkv_order, qkv_factor);
    if (c.qkv_bias)
      L.bqkv = load_stacked(model, {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias",
                                    p + "self_attn.v_proj.bias"}, qkv_order, qkv_factor);
    if (c.qk_norm || c.qk_norm_full) {
      L.q_norm = load_norm(model, p + "self_attn.q_norm.weight");
      L.k_norm = load_norm(model, p + "self_attn.k_norm.weight");
    }
    const std::string wo = p + "self_attn.o_proj.weight", down = p + "mlp.down_proj.weight";
    const std::string wo_bias = p + "self_attn.o_proj.bias";
    L.wo = load_scaled(model.tensor(wo), wo, c.residual_multiplier);
    if (c.o_bias) L.bo = load_shard(model.tensor(wo_bias), wo_bias);
    if (c.attention_sinks) L.sinks = load_f32(model, p + "self_attn.sinks");
    const std::string attn_norm = p + "post_attention_layernorm.weight";
    L.post_norm =
        load_norm(model, c.sandwich_norms ? p + "pre_feedforward_layernorm.weight" : attn_norm);
    if (c.sandwich_norms) L.attn_out_norm = load_norm(model, attn_norm);
    if (c.post_norms || c.sandwich_norms)
      L.post_ff_norm = load_norm(model, p + "post_feedforward_layernorm.weight");
    if (c.moe.sparse(i)) {
      load_moe_layer(model, i, L);
    } else {
      L.w_gate_up = load_stacked(model, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
      L.w_down = load_scaled(model.tensor(down), down, c.residual_multiplier);
    }
    layers_.push_back(std::move(L));
    const Layer& l = layers_.back();
    int64_t bytes = 0;
    for (const Buffer* x : {&l.input_norm, &l.wqkv, &l.bqkv, &l.q_norm, &l.k_norm, &l.wo,
                            &l.attn_out_norm, &l.post_norm, &l.post_ff_norm, &l.w_gate_up,
                            &l.w_down, &l.router, &l.shared_gate_up, &l.shared_down,
                            &l.shared_gate})
      if (x->storage) bytes += int64_t(x->tensor.bytes());
    if (l.experts)
      for (const Buffer& x : l.experts->storage) bytes += int64_t(x.tensor.bytes());
    progress.step(bytes);
  }
  progress.finish();
  const std::string converted = backend_.take_conversion_report();  // packed weights converted at load
  if (!converted.empty())
    std::fprintf(stderr, "flashserve: weights of %s%s: %s\n", model.path().c_str(), rank.c_str(),
                 converted.c_str());
  load_layer_settings();
}

Buffer LlamaModel::load_scaled(const TensorView& full, const std::string& name, float factor) {
  if (factor == 1.f) return load_shard(full, name);
  std::vector<char> storage;
  const TensorView part = shard_view(full, name, storage);
  HostRows rows;
  return backend_.load_weight(
      rewrite_rows(part, {}, std::vector<float>(size_t(part.shape[0]), factor), &rows));
}

// Int4 projections (docs/QUANTIZATION.md) stack packed when they share columns, group size and
// act-order permutation, so that one pass over the activations serves them all; otherwise the
// stack runs as unquantized weights do (said once per weight): the backend makes it from the
// packed parts (the CUDA backend on the GPU), or, where rows are rewritten or a part is not
// int4, each packed part is replaced here by its f32 values (kept in `values`).
static void unstackable_int4(std::vector<TensorView>& parts, std::vector<std::vector<float>>& values,
                             bool rewritten, const std::string& name) {
  std::vector<const Int4Stored*> int4;
  for (const TensorView& t : parts) int4.push_back(t.int4.get());
  if (std::none_of(int4.begin(), int4.end(), [](const Int4Stored* w) { return w != nullptr; }) ||
      int4_stackable(int4))
    return;
  std::fprintf(stderr, "flashserve: %s: the projections stacked with it differ in group size or "
               "act-order permutation (or are not all int4): they run dequantized, not as int4\n",
               name.c_str());
  const bool all_int4 = std::find(int4.begin(), int4.end(), nullptr) == int4.end();
  if (all_int4 && !rewritten) return;
  for (size_t i = 0; i < parts.size(); ++i) parts[i] = unpacked_view(parts[i], &values[i]);
}

Buffer LlamaModel::load_stacked(const LoadedModel& model, const std::vector<std::string>& names,
                                const std::vector<int>& order, const std::vector<float>& factor) {
  std::vector<TensorView> parts;
  std::vector<std::vector<char>> storage(names.size());
  for (size_t i = 0; i < names.size(); ++i)
    parts.push_back(shard_view(model.tensor(names[i]), names[i], storage[i]));
  // Plain and packed int4 weights go to the backend part by part (no host copy); rewritten rows
  // (partial rotary's order, Granite's factors) need the stacked host rows.
  std::vector<std::vector<float>> values(names.size());
  unstackable_int4(parts, values, !order.empty() || !factor.empty(), names[0]);
  // Block-wise FP8 parts go to the backend packed, which stacks them (the CUDA backend on the
  // GPU); beside parts of another kind, or under rewritten rows, they run on their f32 values.
  const auto fp8 = [](const TensorView& t) { return t.block_fp8 != nullptr; };
  if (std::any_of(parts.begin(), parts.end(), fp8) &&
      (!std::all_of(parts.begin(), parts.end(), fp8) || !order.empty() || !factor.empty()))
    for (size_t i = 0; i < parts.size(); ++i) parts[i] = unpacked_view(parts[i], &values[i]);
  if (order.empty() && factor.empty()) return backend_.load_stacked_weight(parts);
  std::vector<char> bytes;
  std::vector<float> row_scales;
  const TensorView stacked = stacked_on_host(parts, &bytes, &row_scales);
  HostRows rewritten;
  return backend_.load_weight(rewrite_rows(stacked, order, factor, &rewritten));
}

Buffer LlamaModel::load_f32(const LoadedModel& model, const std::string& name) {
  const std::vector<float> values = weight_values(model.tensor(name));
  Buffer b = backend_.allocate(DType::kF32, {int64_t(values.size())});
  backend_.copy_from_host(b.tensor, values.data());
  return b;
}

Tensor LlamaModel::scratch(Buffer& buf, DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t(nullptr, dtype, backend_.device(), shape);
  if (!buf.storage || buf.tensor.bytes() < t.bytes()) {
    // Grow by half again so that slowly growing batches do not reallocate every step.
    const int64_t numel = std::max<int64_t>(t.numel() + t.numel() / 2, 1);
    buf = backend_.allocate(dtype, {numel});
    ++ws_epoch_;  // recorded graphs point at the old buffer
  }
  t.data = buf.storage.get();
  return t;
}

void LlamaModel::forward(const StepPlan& s, KvCache& cache, float* logits, int32_t* argmax,
                         float* hidden) {
  launch(s, cache, argmax != nullptr);
  collect(logits, argmax, hidden);
}

void LlamaModel::launch(const StepPlan& s, KvCache& cache, bool argmax) {
  FS_CHECK(!s.tokens.empty(), "empty step");
  const int64_t rows = int64_t(s.logit_rows.size());
  launched_rows_ = launched_wanted_ = rows;
  // Graphs replay decode steps, which never want hidden states (those end a prompt).
  const bool pooled = s.num_hidden_rows > 0;
  if (!(graph_max_batch_ > 0 && !pooled && launch_graph(s, cache))) {
    const StepArgs st = upload_step(s, cache);
    bool identity = rows == int64_t(s.tokens.size());
    for (int64_t i = 0; identity && i < rows; ++i) identity = s.logit_rows[size_t(i)] == i;
    run_layers(st, cache, rows, argmax, identity, /*logits=*/s.num_hidden_rows < rows);
  }
  last_logits_ = launched_rows_ > 0
                     ? scratch(ws_.logits, DType::kF32, {launched_rows_, config_.vocab_size})
                     : Tensor();
}

void LlamaModel::collect(float* logits, int32_t* argmax, float* hidden) {
  const int64_t rows = launched_rows_, wanted = launched_wanted_;
  if (hidden && wanted > 0) copy_hidden(hidden, wanted);
  if (argmax && wanted > 0)
    backend_.copy_to_host(argmax, scratch(ws_.argmax, DType::kI32, {rows}).rows(0, wanted));
  if (logits && wanted > 0)
    backend_.copy_to_host(
        logits, scratch(ws_.logits, DType::kF32, {rows, config_.vocab_size}).rows(0, wanted));
  backend_.synchronize();
}

void LlamaModel::copy_hidden(float* hidden, int64_t rows) {
  const Tensor sel = scratch(ws_.sel, backend_.compute_dtype(), {rows, config_.hidden_size});
  if (sel.dtype == DType::kF32) return backend_.copy_to_host(hidden, sel);
  FS_CHECK(sel.dtype == DType::kBF16 || sel.dtype == DType::kF16, "hidden states in ",
           dtype_name(sel.dtype));
  std::vector<uint16_t> bits(size_t(sel.numel()));
  backend_.copy_to_host(bits.data(), sel);
  const bool bf16 = sel.dtype == DType::kBF16;
  for (size_t i = 0; i < bits.size(); ++i)
    hidden[i] = bf16 ? bf16_bits_to_float(bits[i]) : f16_bits_to_float(bits[i]);
}

StepArgs LlamaModel::upload_step(const StepPlan& s, KvCache& cache) {
  // All of the step's int32 metadata goes up in one copy; the tensors are views into it.
  const int64_t n = int64_t(s.tokens.size()), rows = int64_t(s.logit_rows.size());
  const std::vector<int32_t>* parts[] = {&s.tokens,  &s.positions,   &s.slot_mapping,
                                         &s.cu_q_lens, &s.kv_lens,   &s.block_table,
                                         &s.logit_rows};
  constexpr int kParts = int(std::size(parts));
  meta_host_.clear();
  int64_t offsets[kParts];
  for (int i = 0; i < kParts; ++i) {
    offsets[i] = int64_t(meta_host_.size());
    meta_host_.insert(meta_host_.end(), parts[i]->begin(), parts[i]->end());
  }
  Tensor meta = scratch(ws_.meta, DType::kI32, {int64_t(meta_host_.size())});
  backend_.copy_from_host(meta, meta_host_.data());
  auto view = [&](int i, std::initializer_list<int64_t> shape) {
    return Tensor(static_cast<int32_t*>(meta.data) + offsets[i], DType::kI32, backend_.device(),
                  shape);
  };
  StepArgs b;
  b.num_seqs = s.num_seqs;
  b.num_tokens = int(n);
  b.max_q_len = s.max_q_len;
  b.max_kv_len = s.max_kv_len;
  b.block_size = cache.config().block_size;
  b.max_blocks_per_seq = s.max_blocks_per_seq;
  b.host_kv_lens = s.kv_lens.data();
  b.host_cu_q_lens = s.cu_q_lens.data();
  b.tokens = view(0, {n});
  b.positions = view(1, {n});
  b.slot_mapping = view(2, {n});
  b.cu_q_lens = view(3, {s.num_seqs + 1});
  b.kv_lens = view(4, {s.num_seqs});
  b.block_table = view(5, {s.num_seqs, s.max_blocks_per_seq});
  b.logit_rows = view(6, {rows});
  return b;
}

void LlamaModel::run_layers(const StepArgs& b, KvCache& cache, int64_t rows, bool argmax,
                            bool identity_rows, bool logits) {
  const ModelConfig& c = config_;
  const int64_t n = b.num_tokens;
  const int64_t hidden = c.hidden_size, inter = inter_, d = c.head_dim;  // inter, hq, hkv:
  const int64_t hq = hq_, hkv = hkv_;  // this rank's (the whole model's without a shard)
  const DType act = backend_.compute_dtype();
  const float eps = c.rms_norm_eps;

  // The residual stream lives in two buffers: each residual add reads one and writes the other
  // (a fused add + norm + projection kernel cannot update the rows its other blocks still read).
  Tensor x = scratch(ws_.x, act, {n, hidden});
  Tensor x_next = scratch(ws_.x_next, act, {n, hidden});
  Tensor h = block_out(n);  // normed input of a block / its output
  Tensor qkv = scratch(ws_.qkv, act, {n, (hq + 2 * hkv) * d});
  Tensor q = scratch(ws_.q, act, {n, hq, d});
  Tensor attn = scratch(ws_.attn, act, {n, hq, d});
  // A model without dense MLPs (Mixtral) needs no room for them.
  Tensor gate_up = scratch(ws_.gate_up, act, {n, dense_mlp_ ? 2 * inter : 1});
  Tensor gate = scratch(ws_.gate, act, {n, dense_mlp_ ? inter : 1});
  Tensor moe_in = c.moe.num_experts ? scratch(ws_.moe_in, act, {n, hidden}) : Tensor();

  backend_.embedding(x, b.tokens, embed_.tensor);
  if (embed_scale_ != 1.f) backend_.scale(x, embed_scale_);
  Tensor delta;  // the last block's output, still to be added to x (none before layer 0)
  for (int l = 0; l < c.num_layers; ++l) {
    const Layer& L = layers_[l];
    if (c.post_norms) {  // each block's output is added as it is made: delta stays empty
      run_post_norm_layer(L, l, b, cache, x, h);
      continue;
    }
    // x_next = x + delta; qkv = rms_norm(x_next)·Wqkvᵀ (layer 0: rms_norm(x)·Wqkvᵀ).
    backend_.add_rms_norm_matmul(qkv, h, x_next, x, delta, L.input_norm.tensor, eps, L.wqkv.tensor);
    if (delta.data) std::swap(x, x_next);
    if (c.qkv_bias) backend_.add_bias(qkv, L.bqkv.tensor);
    if (c.qk_norm)
      backend_.qk_norm(qkv.view({n, hq + 2 * hkv, d}), L.q_norm.tensor, L.k_norm.tensor, int(hq),
                       int(hkv), eps);
    backend_.qkv_rope_write_kv(q, cache.k(l), cache.v(l), qkv, b.positions, layer_inv_freq(l),
                               b.slot_mapping);
    backend_.paged_attention(attn, q, cache.k(l), cache.v(l), b, layer_scoring(l));
    row_parallel_matmul(h, attn.view({n, hq * d}), L.wo.tensor);
    if (c.o_bias) backend_.add_bias(h, L.bo.tensor);
    if (c.sandwich_norms) backend_.rms_norm(h, h, L.attn_out_norm.tensor, eps);
    if (L.experts) {  // x += h; h = experts(rms_norm(x))
      backend_.add_rms_norm(moe_in, x, h, L.post_norm.tensor, eps);
      run_moe(L, h, moe_in);
      delta = h;
      continue;
    }
    // x_next = x + h; gate_up = rms_norm(x_next)·Wguᵀ.
    backend_.add_rms_norm_matmul(gate_up, h, x_next, x, h, L.post_norm.tensor, eps,
                                 L.w_gate_up.tensor);
    std::swap(x, x_next);
    if (c.gelu_mlp) backend_.geglu_fused(gate, gate_up);
    else backend_.swiglu_fused(gate, gate_up);
    row_parallel_matmul(h, gate, L.w_down.tensor);
    if (c.sandwich_norms) backend_.rms_norm(h, h, L.post_ff_norm.tensor, eps);
    delta = h;
  }
  if (rows == 0) return;
  Tensor sel = scratch(ws_.sel, act, {rows, hidden});
  Tensor out = scratch(ws_.logits, DType::kF32, {rows, int64_t(c.vocab_size)});
  const Tensor& head = lm_head_.storage ? lm_head_.tensor : embed_.tensor;
  if (identity_rows && delta.data) {  // every row wanted, in order: the last add and the norm
    backend_.add_rms_norm(sel, x, delta, final_norm_.tensor, eps);
  } else {
    if (delta.data) backend_.add(x, x, delta);
    backend_.gather_rows(sel, x, b.logit_rows);
    backend_.rms_norm(sel, sel, final_norm_.tensor, eps);
  }
  if (!logits) return;  // only hidden states wanted: no lm_head
  vocab_parallel_logits(out, sel, head);
  if (c.final_logit_softcapping > 0.f) backend_.softcap(out, c.final_logit_softcapping);
  if (argmax) backend_.argmax_rows(scratch(ws_.argmax, DType::kI32, {rows}), out);
}

bool LlamaModel::launch_graph(const StepPlan& s, KvCache& cache) {
  // Only pure decode steps with a logit row per sequence: the shape a graph can be keyed by.
  const int n = s.num_seqs;
  if (s.max_q_len != 1 || int(s.tokens.size()) != n || int(s.logit_rows.size()) != n) return false;
  for (int i = 0; i < n; ++i)
    if (s.logit_rows[i] != i) return false;
  const int bucket = graph_batch_bucket(n, graph_max_batch_);
  if (bucket == 0) return false;

  // Pad to the bucket: extra sequences hold no keys (the attention kernels write zeros for
  // them), write their K/V nowhere (slot -1) and their logit rows are not copied back.
  const int stride = graph_table_stride(s.max_blocks_per_seq);
  StepPlan& g = graph_plan_;
  g.num_seqs = bucket;
  g.max_q_len = 1;
  g.max_kv_len = s.max_kv_len;
  g.max_blocks_per_seq = stride;
  auto padded = [&](std::vector<int32_t>& dst, const std::vector<int32_t>& src, int32_t fill) {
    dst.assign(src.begin(), src.end());
    dst.resize(size_t(bucket), fill);
  };
  padded(g.tokens, s.tokens, 0);
  padded(g.positions, s.positions, 0);
  padded(g.slot_mapping, s.slot_mapping, -1);
  padded(g.kv_lens, s.kv_lens, 0);
  g.cu_q_lens.resize(size_t(bucket) + 1);
  g.logit_rows.resize(size_t(bucket));
  for (int i = 0; i <= bucket; ++i) g.cu_q_lens[i] = i;
  for (int i = 0; i < bucket; ++i) g.logit_rows[i] = i;
  g.block_table.assign(size_t(bucket) * stride, -1);
  for (int i = 0; i < n; ++i)
    std::copy_n(s.block_table.begin() + size_t(i) * s.max_blocks_per_seq, s.max_blocks_per_seq,
                g.block_table.begin() + size_t(i) * stride);

  const StepArgs st = upload_step(g, cache);
  uint64_t launch = 0;
  if (!backend_.graph_launch_key(st, hq_, hkv_, config_.head_dim, windows_, &launch))
    return false;  // (the upload is harmless: an eager forward re-uploads)
  const GraphKey key{bucket, stride, launch};
  auto epoch = [&] { return ws_epoch_ + (backend_.graph_epoch() << 32); };
  std::shared_ptr<void> graph = graphs_.find(key, epoch());
  if (graph) {
    backend_.replay(graph);
  } else {
    // First time for this key: run the step eagerly (which also sizes every buffer), then
    // record the same ops over the same buffers for the next steps.
    run_layers(st, cache, bucket, /*argmax=*/true, /*identity_rows=*/true);
    const uint64_t before = epoch();
    backend_.begin_capture();
    try {
      run_layers(st, cache, bucket, /*argmax=*/true, /*identity_rows=*/true);  // recorded
      graph = backend_.end_capture();
    } catch (...) {
      backend_.abort_capture();
      throw;
    }
    FS_CHECK(epoch() == before, "a buffer was reallocated while recording a graph");
    graphs_.insert(key, before, graph);
  }
  launched_rows_ = bucket;  // every row of the bucket is computed; the first n are wanted
  return true;
}

}  // namespace flashserve
