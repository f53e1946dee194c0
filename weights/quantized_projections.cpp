// Int4 and block-wise FP8 projections dequantized at load (quantized_projections.h): the
// checkpoint's tensors are looked up first (the lookup maps shards, so one thread), then every
// projection is converted on every core.
#include "weights/quantized_projections.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "core/error.h"
#include "weights/block_fp8_weights.h"
#include "weights/int4_weights.h"
#include "weights/llama_tensors.h"
#include "weights/every_core.h"

namespace flashserve {

namespace {

// One projection to convert: its entries by suffix ("qweight", "weight_scale_inv", ...).
struct Job {
  std::string name, module;  // "model.layers.0.mlp.up_proj.weight", "...mlp.up_proj"
  int64_t rows = 0, cols = 0;
  std::map<std::string, const SafetensorsEntry*> entries;
  std::string path;  // the file of its main tensor
  std::vector<float> values;  // the result, [rows, cols]
  std::shared_ptr<const Int4Weight> int4;  // int4 formats: the packed form values came from
};

// The tensor holding the codes, by format: the one whose absence means "not quantized here".
std::string main_suffix(const QuantConfig& q) {
  if (q.format == QuantFormat::kBlockFp8) return "weight";
  return q.format == QuantFormat::kPackedInt4 ? "weight_packed" : "qweight";
}

void convert(const QuantConfig& q, Job& job) {
  if (q.format == QuantFormat::kBlockFp8) {
    const std::string scale = q.scale_suffix;
    if (!job.entries[scale])
      FS_THROW(job.path, ": missing tensor '", job.module, ".", scale, "' (block-wise FP8 scales)");
    const BlockFp8Weight w = read_block_fp8(*job.entries["weight"], *job.entries[scale], job.name,
                                            job.module + "." + scale, job.rows, job.cols,
                                            q.block_rows, q.block_cols, job.path);
    job.values = dequantize_block_fp8(w);
    return;
  }
  const Int4Source src{job.module, job.path, [&](const std::string& suffix) {
                         auto it = job.entries.find(suffix);
                         return it == job.entries.end() ? nullptr : it->second;
                       }};
  job.int4 = std::make_shared<const Int4Weight>(read_int4(q, src, job.rows, job.cols));
  job.values = dequantize_int4(*job.int4);
}

}  // namespace

void load_quantized_projections(ModelImpl& model, const EntryLookup& find, const std::string& source) {
  const QuantConfig& q = model.config_.quant;
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
  // The projections are independent: converted on every core (a 7B model: 6.5e9 weights).
  for_each_on_every_core(jobs.size(), [&](size_t i) { convert(q, jobs[i]); });
  for (Job& job : jobs) {
    model.owned_.push_back(std::make_unique<float[]>(job.values.size()));
    std::copy(job.values.begin(), job.values.end(), model.owned_.back().get());
    std::vector<float>().swap(job.values);
    TensorView& t = model.tensors_[job.name];
    t.dtype = DType::kF32;
    t.shape = {job.rows, job.cols};
    t.data = model.owned_.back().get();
    t.int4 = std::move(job.int4);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (q.is_int4())
    std::fprintf(stderr, "flashserve: %s: %s: %zu projections read in %.2f s (packed for the CUDA "
                 "backend's int4 kernels; dequantized to f32 for the CPU backend)\n",
                 model.path().c_str(), describe_quantization(q).c_str(), jobs.size(), s);
  else
    std::fprintf(stderr, "flashserve: %s: %s: %zu projections dequantized to f32 at load in %.2f "
                 "s (no block-FP8 matmul kernel yet; the backend holds them in its compute "
                 "dtype)\n", model.path().c_str(), describe_quantization(q).c_str(), jobs.size(), s);
}

}  // namespace flashserve
