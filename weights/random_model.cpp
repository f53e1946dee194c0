// write_random_hf_model: streams each tensor's values (splitmix64, seeded per tensor name) to the
// safetensors file(s), so even 7B-sized benchmark models never sit in memory whole.
#include "weights/random_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "weights/every_core.h"
#include "weights/fp8_weights.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"
#include "weights/safetensors_writer.h"

namespace flashserve {
namespace fs = std::filesystem;

namespace {

// A tiny portable generator, so values are the same on every platform and standard library.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return float(next() >> 40) * (2.f / 16777216.f) - 1.f; }  // [-1, 1)
};

uint64_t name_hash(const std::string& name) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

bool is_norm(const std::string& name) {
  return name.size() >= 11 && name.compare(name.size() - 11, 11, "norm.weight") == 0;
}

// Generates tensor values in chunks and writes them as `dtype`, calling the same generator as
// random_tensor_values.
void write_random_tensor(const TensorSpec& spec, uint64_t seed, float scale, std::ostream& out) {
  int64_t numel = 1;
  for (int64_t d : spec.shape) numel *= d;
  SplitMix64 rng{seed ^ name_hash(spec.name)};
  const bool norm = is_norm(spec.name);
  const float amp = scale * 1.7320508f;  // uniform(-a, a) has std a / sqrt(3)
  constexpr int64_t kChunk = 1 << 20;
  std::vector<float> chunk;
  for (int64_t done = 0; done < numel; done += kChunk) {
    chunk.resize(size_t(std::min(kChunk, numel - done)));
    for (float& v : chunk) v = norm ? 1.f + 0.1f * rng.uniform() : amp * rng.uniform();
    std::vector<uint8_t> bytes = encode_values(chunk, spec.dtype);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
}

// An FP8 projection (spec dtype kF8E4M3) or its weight_scale: the f32 values quantized. The
// scale is written before its weight (larger elements first), so each quantizes on its own.
void write_fp8_tensor(const TensorSpec& spec, const std::vector<int64_t>& weight_shape,
                      const std::string& weight_name, uint64_t seed, float scale, bool per_tensor,
                      std::ostream& out) {
  const std::vector<float> values = random_tensor_values(weight_name, weight_shape, seed, scale);
  const TensorView view{DType::kF32, weight_shape, values.data()};
  const Fp8Rows q = quantize_fp8_rows(view, weight_name, per_tensor);
  if (spec.dtype == DType::kF8E4M3) {
    out.write(reinterpret_cast<const char*>(q.q.data()), std::streamsize(q.q.size()));
  } else {
    const size_t n = per_tensor ? 1 : q.scale.size();
    out.write(reinterpret_cast<const char*>(q.scale.data()), std::streamsize(n * 4));
  }
}

// gpt-oss's MXFP4 experts (weights/mxfp4_weights.h): random E2M1 codes, and per block of 32 an
// E8M0 scale around the one that gives the values a standard deviation of about `scale` (random
// codes have an RMS of 2.93), one step up or down at random.
void write_mxfp4_bytes(const TensorSpec& spec, uint64_t seed, float scale, std::ostream& out) {
  int64_t numel = 1;
  for (int64_t d : spec.shape) numel *= d;
  SplitMix64 rng{seed ^ name_hash(spec.name)};
  const bool scales = spec.name.ends_with("_scales");
  const int centre = 127 + int(std::lround(std::log2(double(scale) / 2.93)));
  std::vector<uint8_t> chunk;
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t done = 0; done < numel; done += kChunk) {
    chunk.resize(size_t(std::min(kChunk, numel - done)));
    for (uint8_t& b : chunk)
      b = scales ? uint8_t(std::clamp(centre + int(rng.next() % 3) - 1, 0, 254))
                 : uint8_t(rng.next() >> 56);
    out.write(reinterpret_cast<const char*>(chunk.data()), std::streamsize(chunk.size()));
  }
}

std::string shard_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

}  // namespace

std::vector<float> random_tensor_values(const std::string& name, const std::vector<int64_t>& shape,
                                        uint64_t seed, float scale) {
  std::ostringstream out;
  write_random_tensor(TensorSpec{name, DType::kF32, shape}, seed, scale, out);
  const std::string bytes = out.str();
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

void write_random_hf_model(const std::string& dir, const ModelConfig& config, uint64_t seed,
                           DType dtype, int num_shards, float scale, Fp8Layout fp8) {
  validate_config(config, dir + " (random model config)");
  FS_CHECK(dtype != DType::kI32 && dtype != DType::kF8E4M3,
           "random models hold f32, f16 or bf16 weights (FP8: the fp8 layout)");
  FS_CHECK(fp8 == Fp8Layout::kNone || !mxfp4_experts(config),
           config.architecture, ": random models with MXFP4 experts keep the rest in ",
           "f32, f16 or bf16 (no FP8 layout)");
  std::vector<TensorSpec> specs;
  std::map<std::string, std::vector<int64_t>> fp8_shape;  // FP8 weight or scale -> weight shape
  for (const auto& [name, shape] : llama_tensor_shapes(config)) {
    if (shape.size() == 3) {  // gpt-oss's stacked experts, as the checkpoint stores them: MXFP4
      const int64_t groups = shape[2] / 32;
      FS_CHECK(mxfp4_experts(config) && shape[2] % 32 == 0, name, ": MXFP4 experts need columns "
               "in blocks of 32, not ", shape[2]);
      specs.push_back({name + "_blocks", DType::kF32, {shape[0], shape[1], groups, 16}, true});
      specs.push_back({name + "_scales", DType::kF32, {shape[0], shape[1], groups}, true});
      continue;
    }
    if (fp8 == Fp8Layout::kNone || !is_fp8_projection(name)) {
      specs.push_back({name, dtype, shape});
      continue;
    }
    specs.push_back({name, DType::kF8E4M3, shape});
    specs.push_back({fp8_scale_name(name), DType::kF32,
                     fp8 == Fp8Layout::kPerTensor ? std::vector<int64_t>{}
                                                  : std::vector<int64_t>{shape[0], 1}});
    fp8_shape[name] = fp8_shape[fp8_scale_name(name)] = shape;
  }
  FS_CHECK(num_shards >= 1 && size_t(num_shards) <= specs.size(), "bad num_shards ", num_shards);

  fs::create_directories(dir);
  const fs::path root(dir);
  {
    ModelConfig written = config;
    written.quant_method = fp8 == Fp8Layout::kNone ? "" : "fp8";
    std::ofstream cfg(root / "config.json");
    cfg << hf_config_json(written);
    if (!cfg) FS_THROW((root / "config.json").string(), ": write failed");
  }
  // Remove the other layout's files so a reused folder is never ambiguous.
  fs::remove(root / (num_shards == 1 ? "model.safetensors.index.json" : "model.safetensors"));

  auto write_file = [&](const std::string& path, const std::vector<TensorSpec>& part) {
    write_safetensors_streamed(path, part, [&](size_t i, std::ostream& out) {
      if (part[i].u8) return write_mxfp4_bytes(part[i], seed, scale, out);
      auto it = fp8_shape.find(part[i].name);
      if (it == fp8_shape.end()) return write_random_tensor(part[i], seed, scale, out);
      const std::string weight = part[i].dtype == DType::kF8E4M3
                                     ? part[i].name
                                     : part[i].name.substr(0, part[i].name.size() - 6);  // "_scale"
      write_fp8_tensor(part[i], it->second, weight, seed, scale, fp8 == Fp8Layout::kPerTensor, out);
    });
  };
  if (num_shards == 1) {
    write_file((root / "model.safetensors").string(), specs);
    return;
  }
  // Contiguous groups of about equal tensor count. Each shard is a file of its own and each
  // tensor's values depend only on its name and the seed, so the shards are written on parallel
  // threads: a 70B-sized model (138 GB) in about a minute on a many-core machine, not six.
  std::vector<std::vector<TensorSpec>> parts;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t total_size = 0;
  for (int s = 0; s < num_shards; ++s) {
    const size_t begin = specs.size() * s / num_shards, end = specs.size() * (s + 1) / num_shards;
    parts.emplace_back(specs.begin() + begin, specs.begin() + end);
    for (const auto& t : parts.back()) {
      weight_map[t.name] = shard_name(s, num_shards);
      uint64_t n = t.u8 ? 1 : dtype_size(t.dtype);
      for (int64_t d : t.shape) n *= uint64_t(d);
      total_size += n;
    }
  }
  for_each_on_every_core(size_t(num_shards), [&](size_t s) {
    write_file((root / shard_name(int(s), num_shards)).string(), parts[s]);
  });
  nlohmann::json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  std::ofstream idx(root / "model.safetensors.index.json");
  idx << index.dump(2) << "\n";
  if (!idx) FS_THROW((root / "model.safetensors.index.json").string(), ": write failed");
}

}  // namespace flashserve
