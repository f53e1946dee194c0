// Quantized checkpoints (docs/QUANTIZATION.md) against what tools/quantize_checkpoint.py wrote:
// the committed one-layer models under data/quantized/ (each folder: config.json,
// model.safetensors and expected.safetensors, the tool's quantized values unpacked; remade by
//   tools/quantize_checkpoint.py --tiny 7 --expected --out DIR --format F [options]
// with gptq_sym: gptq --group-size 32; gptq_asym_actorder: gptq --group-size 32 --asym
// --act-order; awq: awq --group-size 32; ct_group_asym: ct --group-size 32 --asym --act-order;
// ct_channel_sym: ct --group-size -1 --ignore mlp.down_proj; block_fp8: block-fp8 --block-size
// 16; ct_fp8: ct-fp8). Codes and zero points must match exactly, scales and dequantized
// weights bit for bit (int4 and block-FP8 views stay packed, their values asked of
// weights/packed_views.h);
// stacking and row rewrites of the packed form; the matmul twins against
// dequantize-then-multiply; malformed files and unsupported settings fail with messages naming
// the tensor or setting.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

#include "core/error.h"
#include "kernels/cpu/block_fp8_matmul_ref.h"
#include "kernels/cpu/int4_matmul_ref.h"
#include "tests/weights/weights_test_util.h"
#include "weights/block_fp8_weights.h"
#include "weights/hf_config.h"
#include "weights/int4_weights.h"
#include "weights/packed_views.h"
#include "weights/safetensors.h"
#include "weights/safetensors_writer.h"

namespace flashserve {
namespace {

#define EXPECT_MSG(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

const std::string kData = std::string(FS_SOURCE_DIR) + "/tests/weights/data/quantized/";
const char* kProjections[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                              "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};

// A safetensors file held open with its entries.
struct File {
  explicit File(const std::string& path) : mapped(path), entries(parse_safetensors(mapped)) {}
  MappedFile mapped;
  std::map<std::string, SafetensorsEntry> entries;
  const SafetensorsEntry* find(const std::string& name) const {
    auto it = entries.find(name);
    return it == entries.end() ? nullptr : &it->second;
  }
  template <class T>
  std::vector<T> values(const std::string& name) const {
    const SafetensorsEntry& e = entries.at(name);
    std::vector<T> out(e.nbytes / sizeof(T));
    std::memcpy(out.data(), e.data, e.nbytes);
    return out;
  }
};

// A tensor's values: f32 views as they are, packed (int4) ones dequantized as backends ask.
std::vector<float> as_floats(const TensorView& t) {
  std::vector<float> values;
  const TensorView v = unpacked_view(t, &values);
  EXPECT_EQ(v.dtype, DType::kF32);
  const float* p = static_cast<const float*>(v.data);
  return std::vector<float>(p, p + v.numel());
}

// out[i, j] = sum_c x[i, c] w[j, c] in double.
std::vector<double> matmul(const std::vector<float>& x, const std::vector<float>& w, int m, int n,
                           int k) {
  std::vector<double> out(size_t(m * n));
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int c = 0; c < k; ++c)
        out[size_t(i * n + j)] += double(x[size_t(i * k + c)]) * w[size_t(j * k + c)];
  return out;
}

std::vector<float> random_x(int m, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 1.5f);  // not centred on zero
  std::vector<float> x(size_t(m * k));
  for (float& v : x) v = u(rng);
  return x;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num = std::max(num, std::abs(got[i] - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  EXPECT_LT(num / den, tol);
}

// One int4 folder: every quantized projection's internal layout, dequantized weight and twin.
void check_int4_folder(const std::string& folder, bool act_order) {
  SCOPED_TRACE(folder);
  const std::string dir = kData + folder;
  auto model = load_model(dir);
  const QuantConfig& q = model->config().quant;
  ASSERT_TRUE(q.is_int4());
  File ckpt(dir + "/model.safetensors"), want(dir + "/expected.safetensors");
  int checked = 0;
  for (const char* p : kProjections) {
    const std::string module = std::string("model.layers.0.") + p;
    if (!want.find(module + ".codes")) {
      EXPECT_NE(model->tensor(module + ".weight").dtype, DType::kF32);  // kept as stored
      continue;
    }
    ++checked;
    const auto codes = want.values<uint8_t>(module + ".codes");
    const auto zeros = want.values<uint8_t>(module + ".zeros");
    const auto scales = want.values<float>(module + ".scales");
    const auto g_idx = want.values<int32_t>(module + ".g_idx");
    const int64_t rows = want.entries.at(module + ".codes").shape[0], cols = g_idx.size();
    const int64_t groups = int64_t(scales.size()) / rows;
    // The dequantized weight the model holds: (code - zero) * scale of the column's group.
    std::vector<float> deq(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t g = size_t(r * groups + g_idx[size_t(c)]);
        deq[size_t(r * cols + c)] = float(int(codes[size_t(r * cols + c)]) - int(zeros[g])) * scales[g];
      }
    const TensorView& view = model->tensor(module + ".weight");
    EXPECT_TRUE(view.dtype == DType::kI4 && view.int4 && !view.data) << module;  // kept packed
    EXPECT_EQ(as_floats(view), deq) << module;
    // The internal layout: columns ordered by group once, codes and zero points exact.
    const Int4Source src{module, dir, [&](const std::string& s) { return ckpt.find(module + "." + s); }};
    const Int4Weight w = read_int4(q, src, rows, cols);
    EXPECT_EQ(w.perm.empty(), !act_order || groups == 1) << module;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t c = w.perm.empty() ? j : w.perm[size_t(j)];
        ASSERT_EQ(w.code(r, j), codes[size_t(r * cols + c)]) << module << " " << r << " " << j;
        ASSERT_EQ(g_idx[size_t(c)], j / w.group_size);
      }
    EXPECT_EQ(w.zeros, zeros);
    EXPECT_EQ(w.scales, scales);
    EXPECT_EQ(dequantize_int4(w), deq);
    // The twin against dequantize-then-multiply (double sums on both sides: tight).
    const int m = 3;
    const std::vector<float> x = random_x(m, int(cols), 5);
    std::vector<float> out(size_t(m * rows));
    ref::matmul_int4(out.data(), x.data(), w.packed.data(), w.scales.data(), w.zeros.data(),
                     w.perm.empty() ? nullptr : w.perm.data(), m, int(rows), int(cols),
                     int(w.group_size));
    expect_close(out, matmul(x, deq, m, int(rows), int(cols)), 1e-6);
  }
  EXPECT_GT(checked, 0);
  EXPECT_NE(model->tensor("lm_head.weight").dtype, DType::kF32);  // never quantized
}

TEST(QuantizedCheckpoints, GptqSymmetric) { check_int4_folder("gptq_sym", false); }
TEST(QuantizedCheckpoints, GptqAsymmetricActOrder) { check_int4_folder("gptq_asym_actorder", true); }
// gptq_v2 (GPTQModel) stores the zero point itself: the same files read as v2 have every zero
// point one lower than in the classic format.
TEST(QuantizedCheckpoints, GptqV2ZeroPointsHaveNoOffset) {
  const std::string from = kData + "gptq_asym_actorder", dir = test::fresh_dir("v2");
  std::ifstream in(from + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["quantization_config"]["checkpoint_format"] = "gptq_v2";
  test::write_text(dir + "/config.json", j.dump());
  test::fs::copy_file(from + "/model.safetensors", dir + "/model.safetensors");
  auto model = load_model(dir);
  File want(from + "/expected.safetensors");
  const std::string module = "model.layers.0.mlp.down_proj";
  const auto codes = want.values<uint8_t>(module + ".codes");
  const auto zeros = want.values<uint8_t>(module + ".zeros");
  const auto scales = want.values<float>(module + ".scales");
  const auto g_idx = want.values<int32_t>(module + ".g_idx");
  const std::vector<float> got = as_floats(model->tensor(module + ".weight"));
  const size_t cols = g_idx.size(), groups = scales.size() / (codes.size() / cols);
  for (size_t i = 0; i < codes.size(); ++i) {
    const size_t g = i / cols * groups + size_t(g_idx[i % cols]);
    ASSERT_EQ(got[i], float(int(codes[i]) - (int(zeros[g]) - 1)) * scales[g]) << i;
  }
}

TEST(QuantizedCheckpoints, AwqGemm) { check_int4_folder("awq", false); }

// Stacking (q/k/v) and row rewrites (partial rotary's order, Granite's factors) on the packed
// form, for each word packing: the same values as the dequantized rows stacked, reordered and
// scaled, with each scale multiplied by its row's factor.
TEST(QuantizedCheckpoints, Int4StackAndRewriteRows) {
  for (const char* folder : {"gptq_asym_actorder", "awq", "ct_group_asym"}) {
    SCOPED_TRACE(folder);
    auto model = load_model(kData + folder);
    std::vector<const Int4Stored*> parts;
    std::vector<float> want;
    for (const char* p : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}) {
      const TensorView& t = model->tensor(std::string("model.layers.0.") + p + ".weight");
      parts.push_back(t.int4.get());
      const std::vector<float> v = as_floats(t);
      want.insert(want.end(), v.begin(), v.end());
    }
    ASSERT_TRUE(int4_stackable(parts));
    const Int4Stored stacked = stack_int4(parts);
    EXPECT_EQ(dequantize_int4(stacked), want);
    const int64_t rows = stacked.rows, cols = stacked.cols;
    std::vector<int> order(static_cast<size_t>(rows));
    std::vector<float> factor(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      order[size_t(r)] = int((r * 5 + 3) % rows);
      factor[size_t(r)] = 0.5f + 0.25f * float(r % 3);
    }
    ASSERT_NE(rows % 5, 0);  // so 5 r + 3 is a permutation of the rows
    const Int4Stored rewritten = rewrite_int4_rows(stacked, order, factor);
    const Int4Weight in = unpack_int4(stacked), out = unpack_int4(rewritten);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t s = order[size_t(r)], g = j / in.group_size, groups = in.groups();
        ASSERT_EQ(out.code(r, j), in.code(s, j));
        ASSERT_EQ(out.zeros[size_t(r * groups + g)], in.zeros[size_t(s * groups + g)]);
        ASSERT_EQ(out.scales[size_t(r * groups + g)],
                  in.scales[size_t(s * groups + g)] * factor[size_t(r)]);
      }
  }
}
TEST(QuantizedCheckpoints, CompressedTensorsGroupAsymmetricActOrder) {
  check_int4_folder("ct_group_asym", true);
}
TEST(QuantizedCheckpoints, CompressedTensorsChannelWithIgnoredProjection) {
  check_int4_folder("ct_channel_sym", false);
  auto model = load_model(kData + "ct_channel_sym");
  EXPECT_EQ(model->config().quant.group_size, -1);
  EXPECT_EQ(model->tensor("model.layers.0.mlp.down_proj.weight").dtype, DType::kF16);
}

TEST(QuantizedCheckpoints, BlockFp8) {
  const std::string dir = kData + "block_fp8";
  auto model = load_model(dir);
  EXPECT_EQ(model->config().quant_method, "fp8");
  EXPECT_EQ(model->config().quant.format, QuantFormat::kBlockFp8);
  File ckpt(dir + "/model.safetensors"), want(dir + "/expected.safetensors");
  for (const char* p : kProjections) {
    const std::string module = std::string("model.layers.0.") + p;
    const std::vector<float> deq = want.values<float>(module + ".dequantized");
    const TensorView& t = model->tensor(module + ".weight");
    EXPECT_TRUE(is_packed(t) && t.block_fp8 && !t.data) << module;  // no values until asked
    EXPECT_TRUE(test::is_mapped_from(t.block_fp8->codes, dir + "/model.safetensors")) << module;
    EXPECT_EQ(as_floats(t), deq) << module;
    const SafetensorsEntry& we = ckpt.entries.at(module + ".weight");
    const int rows = int(we.shape[0]), cols = int(we.shape[1]);
    const BlockFp8Weight w = read_block_fp8(we, ckpt.entries.at(module + ".weight_scale_inv"),
                                            module + ".weight", module + ".weight_scale_inv",
                                            rows, cols, 16, 16, dir);
    const int m = 2;
    const std::vector<float> x = random_x(m, cols, 6);
    std::vector<float> out(size_t(m * rows));
    ref::matmul_block_fp8(out.data(), x.data(), w.codes, w.scales.data(), m, rows, cols, 16, 16);
    expect_close(out, matmul(x, deq, m, rows, cols), 1e-6);
  }
}

// The NaN scan reads eight codes a word: a NaN (either sign) anywhere, first word, word edges,
// the tail past the last whole word, is found at its element; codes next to NaN's bits are not.
TEST(QuantizedCheckpoints, BlockFp8NanCodesAnywhere) {
  const int64_t rows = 3, cols = 4099;  // 12297 codes: whole 4 KiB chunks, then a ragged tail
  std::mt19937 rng(11);
  std::vector<uint8_t> codes(size_t(rows * cols));
  for (uint8_t& c : codes) c = uint8_t(rng() % 0x7F) | uint8_t(rng() & 0x80);  // 0x7E, 0xFE, ...
  const float one = 1.f;
  SafetensorsEntry weight{"F8_E4M3", {rows, cols}, codes.data(), codes.size()};
  SafetensorsEntry scale{"F32", {1, 1}, reinterpret_cast<const uint8_t*>(&one), 4};
  auto read = [&] {
    return read_block_fp8(weight, scale, "w", "s", rows, cols, 128, 8192, "f");
  };
  const BlockFp8Weight clean = read();
  EXPECT_EQ(clean.codes, codes.data());  // left where they are
  for (int64_t at : {0, 5, 7, 8, 4095, 4096, 12287, 12288, 12296}) {
    for (uint8_t nan : {uint8_t(0x7F), uint8_t(0xFF)}) {
      const uint8_t kept = codes[size_t(at)];
      codes[size_t(at)] = nan;
      try {
        read();
        ADD_FAILURE() << "NaN at " << at << " not found";
      } catch (const Error& e) {
        EXPECT_MSG(std::string(e.what()), "holds a NaN code at element " + std::to_string(at));
      }
      codes[size_t(at)] = kept;
    }
  }
}

TEST(QuantizedCheckpoints, CompressedTensorsFp8IsTheFp8Path) {
  auto model = load_model(kData + "ct_fp8");
  EXPECT_EQ(model->config().quant_method, "fp8");
  const TensorView& t = model->tensor("model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(t.dtype, DType::kF8E4M3);
  EXPECT_NE(t.row_scale, nullptr);
  EXPECT_EQ(model->tensor("lm_head.weight").dtype, DType::kF16);
}

// ---- malformed files ---------------------------------------------------------------------------

// A copy of data folder `from` whose model.safetensors has `edit` applied to its tensors.
std::string edited_copy(const std::string& from,
                        const std::function<void(std::vector<WriterTensor>&)>& edit) {
  const std::string dir = test::fresh_dir(from);
  test::fs::copy_file(kData + from + "/config.json", dir + "/config.json");
  File f(kData + from + "/model.safetensors");
  std::vector<WriterTensor> tensors;
  const std::map<std::string, DType> dtypes = {{"F32", DType::kF32}, {"F16", DType::kF16},
                                               {"BF16", DType::kBF16}, {"I32", DType::kI32},
                                               {"F8_E4M3", DType::kF8E4M3}};
  for (const auto& [name, e] : f.entries)
    tensors.push_back({{name, dtypes.at(e.dtype), e.shape}, {e.data, e.data + e.nbytes}});
  edit(tensors);
  write_safetensors(dir + "/model.safetensors", tensors);
  return dir;
}

WriterTensor& tensor(std::vector<WriterTensor>& ts, const std::string& name) {
  for (WriterTensor& t : ts)
    if (t.spec.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

std::string load_error(const std::string& dir) {
  return test::error_of([&] { load_model(dir); }, "(loaded)");
}

const std::string kDown = "model.layers.0.mlp.down_proj";

TEST(QuantizedCheckpoints, MalformedFilesGiveErrorsNamingTheTensor) {
  const std::string gptq = "gptq_asym_actorder";
  std::string dir = edited_copy(gptq, [](auto& ts) {  // a NaN scale (f16 0x7E00)
    WriterTensor& s = tensor(ts, kDown + ".scales");
    s.bytes[2] = 0x00, s.bytes[3] = 0x7E;
  });
  EXPECT_MSG(load_error(dir), "tensor '" + kDown + ".scales' holds nan; scales must be finite");
  dir = edited_copy(gptq, [](auto& ts) {  // qweight of the wrong shape
    WriterTensor& q = tensor(ts, kDown + ".qweight");
    q.spec.shape = {4, 64};
  });
  EXPECT_MSG(load_error(dir), "tensor '" + kDown + ".qweight' has shape [4, 64] but GPTQ needs [8, 32]");
  dir = edited_copy(gptq, [](auto& ts) {  // a group index past the last group
    std::memset(tensor(ts, kDown + ".g_idx").bytes.data(), 9, 1);
  });
  EXPECT_MSG(load_error(dir), "tensor '" + kDown + ".g_idx' holds group 9; there are 2 groups");
  dir = edited_copy(gptq, [](auto& ts) {  // every column in group 0: not group_size each
    std::vector<uint8_t>& b = tensor(ts, kDown + ".g_idx").bytes;
    std::fill(b.begin(), b.end(), 0);
  });
  EXPECT_MSG(load_error(dir), "the g_idx of '" + kDown + "' does not give every group 32 columns");
  dir = edited_copy(gptq, [](auto& ts) {
    ts.erase(std::find_if(ts.begin(), ts.end(), [](const WriterTensor& t) {
      return t.spec.name == kDown + ".qzeros";
    }));
  });
  EXPECT_MSG(load_error(dir), "missing tensor '" + kDown + ".qzeros' (GPTQ)");
  dir = edited_copy(gptq, [](auto& ts) {  // scales as int32
    WriterTensor& s = tensor(ts, kDown + ".scales");
    s.spec.dtype = DType::kI32, s.spec.shape = {1, 32};
  });
  EXPECT_MSG(load_error(dir), "tensor '" + kDown + ".scales' has dtype I32; GPTQ stores it as F16");
  // Block-wise FP8: scales of the wrong block grid, and a negative scale.
  dir = edited_copy("block_fp8", [](auto& ts) {
    tensor(ts, kDown + ".weight_scale_inv").spec.shape = {4, 2};
  });
  EXPECT_MSG(load_error(dir), "tensor '" + kDown + ".weight_scale_inv' has the wrong shape: "
                              "blocks of 16x16 over [32, 64] need [2, 4]");
  dir = edited_copy("block_fp8", [](auto& ts) {
    tensor(ts, kDown + ".weight_scale_inv").bytes[3] = 0xFF;  // -nan
  });
  EXPECT_MSG(load_error(dir), "tensor '" + kDown + ".weight_scale_inv' holds");
  dir = edited_copy("block_fp8", [](auto& ts) {
    tensor(ts, kDown + ".weight").bytes[5] = 0xFF;  // E4M3's NaN
  });
  EXPECT_MSG(load_error(dir), "tensor '" + kDown + ".weight' holds a NaN code at element 5");
  // A truncated file: the safetensors reader names it.
  dir = test::fresh_dir("truncated");
  test::fs::copy_file(kData + gptq + "/config.json", dir + "/config.json");
  std::vector<uint8_t> bytes = test::read_bytes(kData + gptq + "/model.safetensors");
  test::write_bytes(dir + "/model.safetensors", bytes.data(), bytes.size() - 100);
  EXPECT_MSG(load_error(dir), dir + "/model.safetensors");
}

// ---- unsupported settings ----------------------------------------------------------------------

std::string config_error(const nlohmann::json& quantization_config) {
  const std::string dir = test::fresh_dir("config");
  std::ifstream in(kData + "gptq_sym/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  j["quantization_config"] = quantization_config;
  test::write_text(dir + "/config.json", j.dump());
  return test::error_of([&] { read_hf_config(dir + "/config.json"); }, "(accepted)");
}

TEST(QuantizedCheckpoints, UnsupportedSettingsAreStartUpErrors) {
  using nlohmann::json;
  const json gptq = {{"quant_method", "gptq"}, {"bits", 4}, {"group_size", 128}};
  auto with = [](json j, const char* key, json v) { j[key] = v; return j; };
  EXPECT_EQ(config_error(gptq), "(accepted)");
  EXPECT_MSG(config_error(with(gptq, "bits", 8)), "quantization_config bits 8 is not supported");
  EXPECT_MSG(config_error(with(gptq, "group_size", 48)), "group_size 48 is not supported");
  EXPECT_MSG(config_error(with(gptq, "checkpoint_format", "marlin")), "checkpoint_format marlin");
  EXPECT_MSG(config_error(with(gptq, "is_marlin_format", true)), "checkpoint_format marlin");
  EXPECT_MSG(config_error(with(gptq, "lm_head", true)),
             "lm_head true (a quantized lm_head) is not supported");
  EXPECT_MSG(config_error({{"quant_method", "awq"}, {"version", "gemv"}}),
             "version \"gemv\" is not supported (only \"gemm\"");
  EXPECT_MSG(config_error({{"quant_method", "awq"}, {"zero_point", false}}), "zero_point false");
  EXPECT_MSG(config_error({{"quant_method", "bitsandbytes"}}),
             "quant_method \"bitsandbytes\" is not supported");
  EXPECT_MSG(config_error({{"quant_method", "fp8"}, {"weight_block_size", {128}}}),
             "weight_block_size [128] is not supported");
  std::ifstream in(kData + "ct_group_asym/config.json");
  const json ct = json::parse(in)["quantization_config"];
  json w4a8 = ct;
  w4a8["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "int"}};
  EXPECT_MSG(config_error(w4a8), "quantizes input_activations: only weight-only int4");
  json other = ct;
  other["format"] = other["config_groups"]["group_0"]["format"] = "marlin-24";
  EXPECT_MSG(config_error(other), "format \"marlin-24\" is not supported");
  json bad_regex = ct;
  bad_regex["ignore"] = {"re:("};
  EXPECT_MSG(config_error(bad_regex), "ignore entry \"re:(\" is not a valid regular expression");
  json sparse = ct;
  sparse["sparsity_config"] = {{"format", "sparse-24-bitmask"}};
  EXPECT_MSG(config_error(sparse), "sparsity_config sparse-24-bitmask is not supported");
  json bits = ct;
  bits["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
  EXPECT_MSG(config_error(bits), "bits 8 is not supported");
}

TEST(QuantizedCheckpoints, ConfigNamesWhichProjectionsAreQuantized) {
  QuantConfig q;
  q.format = QuantFormat::kPackedInt4;
  q.ignore = {"lm_head", "re:.*mlp\\.down_proj$", "model.layers.1.self_attn.q_proj"};
  EXPECT_TRUE(stores_quantized(q, "model.layers.0.mlp.up_proj.weight"));
  EXPECT_FALSE(stores_quantized(q, "model.layers.3.mlp.down_proj.weight"));
  EXPECT_FALSE(stores_quantized(q, "model.layers.1.self_attn.q_proj.weight"));
  EXPECT_TRUE(stores_quantized(q, "model.layers.11.self_attn.q_proj.weight"));
  EXPECT_FALSE(stores_quantized(q, "lm_head.weight"));
  EXPECT_FALSE(stores_quantized(q, "model.embed_tokens.weight"));
  q.ignore.clear();
  q.only_in_block = {"self_attn.q_proj", "mlp.up_proj"};
  EXPECT_TRUE(stores_quantized(q, "model.layers.2.mlp.up_proj.weight"));
  EXPECT_FALSE(stores_quantized(q, "model.layers.2.mlp.gate_proj.weight"));
}

}  // namespace
}  // namespace flashserve
