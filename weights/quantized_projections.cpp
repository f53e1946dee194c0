// Int4 and block-wise FP8 projections, and gpt-oss's MXFP4 experts, read at load (quantized_projections.h): the checkpoint's
// tensors are looked up first (the lookup maps shards, so one thread), then every projection is
// read on every core (scales, zero points and g_idx checked, block-FP8 codes scanned for NaNs;
// the codes left in the file either way).
#include "weights/quantized_projections.h"

#include <chrono>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "weights/block_fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/llama_tensors.h"
#include "weights/mxfp4_weights.h"
#include "weights/every_core.h"

namespace flashserve {

namespace {

// One projection to read: its entries by suffix ("qweight", "weight_scale_inv", ...).
struct Job {
  std::string name, module;  // "model.layers.0.mlp.up_proj.weight", "...mlp.up_proj"
  int64_t rows = 0, cols = 0;
  std::map<std::string, const SafetensorsEntry*> entries;
  std::string path;  // the file of its main tensor
  std::shared_ptr<const Int4Stored> int4;  // int4 formats: the weight as stored (no values)
  std::shared_ptr<const BlockFp8Weight> block_fp8;  // block-wise FP8: the codes and scales
};

// The tensor holding the codes, by format: the one whose absence means "not quantized here".
std::string main_suffix(const QuantConfig& q) {
  if (q.format == QuantFormat::kBlockFp8) return "weight";
  return q.format == QuantFormat::kPackedInt4 ? "weight_packed" : "qweight";
}

void read_projection(const QuantConfig& q, Job& job) {
  if (q.format == QuantFormat::kBlockFp8) {
    const std::string scale = q.scale_suffix;
    if (!job.entries[scale])
      FS_THROW(job.path, ": missing tensor '", job.module, ".", scale, "' (block-wise FP8 scales)");
    job.block_fp8 = std::make_shared<const BlockFp8Weight>(
        read_block_fp8(*job.entries["weight"], *job.entries[scale], job.name,
                       job.module + "." + scale, job.rows, job.cols, q.block_rows, q.block_cols,
                       job.path));
    return;
  }
  const Int4Source src{job.module, job.path, [&](const std::string& suffix) {
                         auto it = job.entries.find(suffix);
                         return it == job.entries.end() ? nullptr : it->second;
                       }};
  job.int4 = std::make_shared<const Int4Stored>(read_int4_stored(q, src, job.rows, job.cols));
}

// gpt-oss's experts: each layer's gate_up_proj and down_proj from their _blocks and _scales.
void load_mxfp4_experts(ModelImpl& model, const EntryLookup& find, const std::string& source) {
  const ModelConfig& c = model.config_;
  const auto start = std::chrono::steady_clock::now();
  int count = 0;
  for (int i = 0; i < c.num_layers; ++i) {
    if (!c.moe.sparse(i)) continue;
    for (ExpertProj which : {ExpertProj::kGate, ExpertProj::kDown}) {
      const std::string name = moe_stacked_name(i, which);
      const int64_t rows = which == ExpertProj::kGate ? 2 * int64_t(c.moe.intermediate) : c.hidden_size;
      const int64_t cols = which == ExpertProj::kGate ? c.hidden_size : c.moe.intermediate;
      std::string blocks_file, scales_file;
      const SafetensorsEntry* blocks = find(name + "_blocks", &blocks_file);
      const SafetensorsEntry* scales = find(name + "_scales", &scales_file);
      for (const auto& [e, suffix] : {std::pair{blocks, "_blocks"}, std::pair{scales, "_scales"}})
        if (!e)
          FS_THROW(source, ": missing tensor '", name, suffix, "' (config.json says MXFP4 experts",
                   find(name, &blocks_file) ? "; the checkpoint holds them unquantized, which is "
                   "not supported" : "", ")");
      auto w = std::make_shared<const Mxfp4Weight>(
          read_mxfp4(*blocks, *scales, name, c.moe.num_experts, rows, cols, blocks_file));
      TensorView& t = model.tensors_[name];
      t.dtype = DType::kF32;  // that of its values
      t.shape = {c.moe.num_experts, rows, cols};
      t.data = nullptr;
      t.mxfp4 = std::move(w);
      ++count;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "flashserve: %s: %d MXFP4 expert weights read in %.2f s (kept as stored)\n",
               model.path().c_str(), count, s);
}

}  // namespace

void load_quantized_projections(ModelImpl& model, const EntryLookup& find, const std::string& source) {
  const QuantConfig& q = model.config_.quant;
  if (q.format == QuantFormat::kMxfp4) return load_mxfp4_experts(model, find, source);
  if (!q.is_int4() && q.format != QuantFormat::kBlockFp8) return;
  const auto start = std::chrono::steady_clock::now();
  std::string file;
  for (const char* s : {"lm_head.qweight", "lm_head.weight_packed"})
    if (q.is_int4() && find(s, &file))
      FS_THROW(file, ": tensor '", s, "': a quantized lm_head is not supported (the config's "
               "ignore list must name lm_head)");
  std::vector<Job> jobs;
  for (const auto& [name, shape] : llama_tensor_shapes(model.config_)) {
    if (!stores_quantized(q, name)) continue;
    // A block-FP8 checkpoint's projection kept in bf16 without scales loads as stored, as in
    // FP8 checkpoints of the other kinds (not every exporter lists those in the config).
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    const SafetensorsEntry* plain = find(name, &file);
    if (q.format == QuantFormat::kBlockFp8 && plain && plain->dtype != "F8_E4M3" &&
        !find(module + "." + q.scale_suffix, &file))
      continue;
    Job& job = jobs.emplace_back();
    job.name = name;
    job.module = module;
    job.rows = shape[0], job.cols = shape[1];
    const std::string main = main_suffix(q);
    if (!find(job.module + "." + main, &job.path))
      FS_THROW(source, ": missing tensor '", job.module, ".", main, "' (config.json says ",
               describe_quantization(q), plain ? "; the checkpoint holds it unquantized, but the "
               "quantization_config does not list it as ignored" : "", ")");
    for (const char* s : {"weight", "qweight", "qzeros", "scales", "g_idx", "weight_packed",
                          "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx",
                          "weight_scale_inv"})
      job.entries[s] = find(job.module + "." + s, &file);
  }
  // The projections are independent: read on every core (a 7B model: 6.5e9 weights).
  for_each_on_every_core(jobs.size(), [&](size_t i) { read_projection(q, jobs[i]); });
  for (Job& job : jobs) {  // packed: weights/packed_views.h gives values to whoever needs them
    TensorView& t = model.tensors_[job.name];
    t.shape = {job.rows, job.cols};
    t.dtype = job.int4 ? DType::kI4 : DType::kF32;  // block-FP8: the dtype of its values
    t.data = nullptr;
    t.int4 = std::move(job.int4);
    t.block_fp8 = std::move(job.block_fp8);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "flashserve: %s: %s: %zu projections read in %.2f s (kept as stored: the "
               "backend converts them as it loads them)\n", model.path().c_str(),
               describe_quantization(q).c_str(), jobs.size(), s);
}

}  // namespace flashserve
