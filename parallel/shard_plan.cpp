// The shard plan: divisibility checks with the config.json names users know, each rank's
// ranges, and how each named weight is cut.
#include "parallel/shard_plan.h"

#include <cstring>

#include "core/error.h"
#include "parallel/packed_slice.h"
#include "weights/llama_tensors.h"
#include "weights/packed_views.h"

namespace flashserve {

void check_tensor_parallel(const ModelConfig& c, int size) {
  // Start-up errors a user reads: plain messages, no "check failed" (FS_THROW, not FS_CHECK).
  if (size < 1) FS_THROW("tensor-parallel-size must be >= 1, got ", size);
  const auto divides = [&](int64_t n, const char* what, const char* why) {
    if (n % size != 0)
      FS_THROW("tensor-parallel-size ", size, " does not divide the model's ", what, " ", n, " (",
               why, "): use a size that divides it");
  };
  divides(c.num_q_heads, "num_attention_heads", "each rank computes as many query heads");
  divides(c.intermediate_size, "intermediate_size", "each rank holds as many MLP columns");
  divides(c.vocab_size, "vocab_size", "each rank holds as many rows of the vocabulary projection");
  if (c.moe.num_experts > 0) {
    divides(c.moe.intermediate, "moe_intermediate_size", "each rank holds as many of every "
            "expert's columns");
    divides(c.moe.shared_intermediate, "shared_expert_intermediate_size", "each rank holds as "
            "many of the shared expert's columns");
  }
  if (c.num_kv_heads % size != 0 && (c.num_kv_heads <= 0 || size % c.num_kv_heads != 0))
    FS_THROW("tensor-parallel-size ", size, " and the model's num_key_value_heads ",
             c.num_kv_heads, ": one must divide the other (KV heads are split across the ranks, "
             "or each replicated on several ranks when there are fewer KV heads than ranks)");
}

int row_parallel_slices(const ModelConfig& c, int size) {
  const int s = kRowParallelSlices;
  const bool fits = s % size == 0 && (int64_t(c.num_q_heads) * c.head_dim) % s == 0 &&
                    c.intermediate_size % s == 0;
  return fits ? s : size;
}

ShardPlan make_shard_plan(const ModelConfig& c, int size, int rank) {
  check_tensor_parallel(c, size);
  FS_CHECK(rank >= 0 && rank < size, "rank ", rank, " of ", size);
  ShardPlan p;
  p.size = size;
  p.rank = rank;
  p.q_heads = c.num_q_heads / size;
  p.q_head0 = rank * p.q_heads;
  if (c.num_kv_heads >= size) {
    p.kv_heads = c.num_kv_heads / size;
    p.kv_head0 = rank * p.kv_heads;
  } else {  // replicated: this rank's query heads all belong to this one KV head's group
    p.kv_heads = 1;
    p.kv_head0 = rank * c.num_kv_heads / size;
  }
  p.inter = c.intermediate_size / size;
  p.inter0 = rank * p.inter;
  p.moe_inter = c.moe.intermediate / size;
  p.moe_inter0 = rank * p.moe_inter;
  p.shared_inter = c.moe.shared_intermediate / size;
  p.shared_inter0 = rank * p.shared_inter;
  p.vocab = c.vocab_size / size;
  p.vocab0 = rank * p.vocab;
  p.k_slices = row_parallel_slices(c, size) / size;
  return p;
}

namespace {
bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}
}  // namespace

WeightSplit weight_split(const ShardPlan& p, const ModelConfig& c, const std::string& name) {
  using K = WeightSplit::Kind;
  const int64_t d = c.head_dim;
  const bool q = ends_with(name, "self_attn.q_proj.weight") || ends_with(name, "self_attn.q_proj.bias");
  const bool kv = ends_with(name, "self_attn.k_proj.weight") || ends_with(name, "self_attn.k_proj.bias") ||
                  ends_with(name, "self_attn.v_proj.weight") || ends_with(name, "self_attn.v_proj.bias");
  if (q) return {K::kRows, p.q_head0 * d, p.q_heads * d};
  if (kv) return {K::kRows, p.kv_head0 * d, p.kv_heads * d};
  if (ends_with(name, "self_attn.o_proj.weight")) return {K::kColumns, p.q_head0 * d, p.q_heads * d};
  if (ends_with(name, "mlp.gate_proj.weight") || ends_with(name, "mlp.up_proj.weight"))
    return {K::kRows, p.inter0, p.inter};
  if (ends_with(name, "mlp.down_proj.weight")) return {K::kColumns, p.inter0, p.inter};
  if (name == "lm_head.weight") return {K::kRows, p.vocab0, p.vocab};
  if (const MoeTensor m = moe_tensor(name); m.role != MoeRole::kNone) {
    const bool shared = m.role == MoeRole::kShared;
    const int64_t begin = shared ? p.shared_inter0 : p.moe_inter0;
    const int64_t count = shared ? p.shared_inter : p.moe_inter;
    return {m.proj == ExpertProj::kDown ? K::kColumns : K::kRows, begin, count};
  }  // the router and the shared expert's gate: whole
  return {};  // embedding, norms, q/k norms: whole on every rank
}

TensorView slice_weight(const TensorView& full, const WeightSplit& s, std::vector<char>& storage) {
  using K = WeightSplit::Kind;
  if (s.kind == K::kWhole) return full;
  // FP8 row scales come from whole rows: a column cut of a view still to be quantized would
  // give other ones (LoadOptions::fp8_in_backend is off under tensor parallelism).
  FS_CHECK(!full.to_fp8 || s.kind == K::kRows, "cannot cut the columns of a weight marked to_fp8");
  // A packed (int4, block-FP8) weight stays packed where the cut keeps its groups, words or
  // blocks (parallel/packed_slice.h), else it is sliced as its f32 values, so the views below
  // never carry a packed form.
  if (is_packed(full)) {
    if (std::optional<TensorView> packed = slice_packed(full, s)) return *packed;
    std::vector<float> values;
    std::vector<char> cut;
    TensorView out = slice_weight(unpacked_view(full, &values), s, cut);
    const char* at = static_cast<const char*>(out.data);
    storage.assign(at, at + size_t(out.numel()) * dtype_size(out.dtype));
    out.data = storage.data();
    return out;
  }
  const int dim = s.kind == K::kRows ? 0 : 1;
  FS_CHECK(int(full.shape.size()) > dim && s.begin >= 0 && s.count >= 0 &&
               s.begin + s.count <= full.shape[size_t(dim)],
           "cannot cut ", s.count, " from ", s.begin, " of dim ", dim, " of a ",
           full.shape.size(), "-d weight");
  const size_t elem = dtype_size(full.dtype);
  const int64_t cols = full.shape.size() > 1 ? full.numel() / full.shape[0] : 1;
  TensorView out = full;
  out.shape[size_t(dim)] = s.count;
  if (s.kind == K::kRows) {
    out.data = static_cast<const char*>(full.data) + size_t(s.begin * cols) * elem;
    if (out.row_scale) out.row_scale += s.begin;  // FP8: each row keeps its scale
    return out;
  }
  // Columns of a [rows, cols] matrix: each row's run of `count` elements, gathered (an FP8
  // weight's row scales stay as they are).
  const int64_t rows = full.shape[0];
  storage.resize(size_t(rows * s.count) * elem);
  const char* src = static_cast<const char*>(full.data);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(storage.data() + size_t(r * s.count) * elem,
                src + size_t(r * cols + s.begin) * elem, size_t(s.count) * elem);
  out.data = storage.data();
  return out;
}

}  // namespace flashserve
