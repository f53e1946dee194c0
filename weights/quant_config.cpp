// quantization_config parsing (quant_config.h): one reader per quant_method, each refusing by
// name what it does not load.
#include "weights/quant_config.h"

#include <nlohmann/json.hpp>

#include <regex>

#include "core/error.h"
#include "weights/fp8_weights.h"

namespace flashserve {

namespace {

using nlohmann::json;

// q[key] as a string, "" when absent or null; another type is an error.
std::string str(const json& q, const char* key, const std::string& where) {
  if (!q.contains(key) || q[key].is_null()) return "";
  if (!q[key].is_string()) FS_THROW(where, " ", key, " must be a string");
  return q[key].get<std::string>();
}

bool flag(const json& q, const char* key, bool fallback, const std::string& where) {
  if (!q.contains(key) || q[key].is_null()) return fallback;
  if (!q[key].is_boolean()) FS_THROW(where, " ", key, " must be true or false");
  return q[key].get<bool>();
}

// The first of `keys` present, as an int; `fallback` when none is.
int integer(const json& q, std::initializer_list<const char*> keys, int fallback,
            const std::string& where) {
  for (const char* key : keys) {
    if (!q.contains(key) || q[key].is_null()) continue;
    if (!q[key].is_number_integer()) FS_THROW(where, " ", key, " must be an integer");
    return q[key].get<int>();
  }
  return fallback;
}

std::vector<std::string> strings(const json& q, const char* key, const std::string& where) {
  std::vector<std::string> out;
  if (!q.contains(key) || q[key].is_null()) return out;
  if (!q[key].is_array()) FS_THROW(where, " ", key, " must be a list of strings");
  for (const json& e : q[key]) {
    if (!e.is_string()) FS_THROW(where, " ", key, " must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

void check_bits(int bits, const std::string& where) {
  if (bits != 4)
    FS_THROW(where, " bits ", bits, " is not supported (only 4-bit integer weights)");
}

void check_group_size(int g, const std::string& where) {
  if (g != 32 && g != 64 && g != 128 && g != -1)
    FS_THROW(where, " group_size ", g, " is not supported (32, 64, 128 or -1)");
}

// HF FP8: per-tensor/per-channel weight_scale, or weight_block_size with weight_scale_inv.
void read_fp8(const json& q, const std::string& where, QuantConfig* c) {
  c->format = QuantFormat::kFp8;
  for (const char* key : {"fmt", "weight_dtype"})
    if (q.contains(key) && q[key].is_string() && q[key] != "e4m3" && q[key] != "float8_e4m3fn")
      FS_THROW(where, " ", key, " ", q[key].dump(), " is not supported (only e4m3)");
  if (q.contains("activation_scheme") && !q["activation_scheme"].is_null() &&
      q["activation_scheme"] != "dynamic" && q["activation_scheme"] != "static")
    FS_THROW(where, " activation_scheme ", q["activation_scheme"].dump(),
             " is not supported (dynamic or static)");
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() ||
        !b[1].is_number_integer() || b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 ||
        b[0].get<int64_t>() > 4096 || b[1].get<int64_t>() > 4096)
      FS_THROW(where, " weight_block_size ", b.dump(), " is not supported (two positive "
               "block sizes, [rows, columns], such as [128, 128])");
    c->format = QuantFormat::kBlockFp8;
    c->block_rows = b[0].get<int>();
    c->block_cols = b[1].get<int>();
    c->scale_suffix = "weight_scale_inv";
  }
  c->ignore = strings(q, "modules_to_not_convert", where);
  c->ignore_substrings = true;  // transformers skips any module whose name contains an entry
}

void read_gptq(const json& q, const std::string& where, QuantConfig* c) {
  c->format = QuantFormat::kGptq;
  check_bits(integer(q, {"bits"}, 4, where), where);
  c->group_size = integer(q, {"group_size"}, 128, where);
  check_group_size(c->group_size, where);
  c->desc_act = flag(q, "desc_act", false, where);
  c->sym = flag(q, "sym", true, where);
  const std::string fmt = str(q, "checkpoint_format", where);
  if (flag(q, "is_marlin_format", false, where) || (fmt != "" && fmt != "gptq" && fmt != "gptq_v2"))
    FS_THROW(where, " checkpoint_format ", fmt.empty() ? "marlin" : fmt, " is not supported "
             "(only the gptq and gptq_v2 packing; repack marlin/exllama checkpoints as gptq)");
  c->gptq_zero_offset = fmt == "gptq_v2" ? 0 : 1;
  if (flag(q, "lm_head", false, where))
    FS_THROW(where, " lm_head true (a quantized lm_head) is not supported");
  if (q.contains("modules_in_block_to_quantize") && !q["modules_in_block_to_quantize"].is_null()) {
    const json& m = q["modules_in_block_to_quantize"];
    if (!m.is_array()) FS_THROW(where, " modules_in_block_to_quantize must be a list");
    for (const json& e : m)
      for (const json& name : e.is_array() ? e : json::array({e})) {
        if (!name.is_string())
          FS_THROW(where, " modules_in_block_to_quantize must hold module names");
        c->only_in_block.push_back(name.get<std::string>());
      }
  }
}

void read_awq(const json& q, const std::string& where, QuantConfig* c) {
  c->format = QuantFormat::kAwq;
  const std::string version = str(q, "version", where);
  if (version != "" && version != "gemm" && version != "GEMM")
    FS_THROW(where, " version \"", version, "\" is not supported (only \"gemm\": the "
             "gemv/exllama/marlin packings are not)");
  check_bits(integer(q, {"bits", "w_bit"}, 4, where), where);
  c->group_size = integer(q, {"group_size", "q_group_size"}, 128, where);
  check_group_size(c->group_size, where);
  if (!flag(q, "zero_point", true, where))
    FS_THROW(where, " zero_point false is not supported (AWQ gemm stores zero points)");
  c->sym = false;
  c->ignore = strings(q, "modules_to_not_convert", where);
  c->ignore_substrings = true;  // AutoAWQ skips any module whose name contains an entry
}

// compressed-tensors: pack-quantized int4 weights, or FP8 weights (float-quantized).
void read_compressed(const json& q, const std::string& where, QuantConfig* c) {
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    FS_THROW(where, " has no config_groups");
  if (q.contains("sparsity_config") && q["sparsity_config"].is_object()) {
    const std::string sparsity = str(q["sparsity_config"], "format", where + " sparsity_config");
    if (!sparsity.empty() && sparsity != "dense")
      FS_THROW(where, " sparsity_config ", sparsity, " is not supported (sparse weights)");
  }
  const json* weights = nullptr;
  std::string format = str(q, "format", where);
  for (const auto& [name, g] : q["config_groups"].items()) {
    const std::string gw = where + " config_groups." + name;
    if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object())
      FS_THROW(gw, " has no weights scheme");
    if (weights && *weights != g["weights"])
      FS_THROW(where, ": config_groups with different weight schemes are not supported");
    weights = &g["weights"];
    if (!g.contains("targets") || g["targets"] != json::array({"Linear"}))
      FS_THROW(gw, " targets ", g.contains("targets") ? g["targets"].dump() : "(missing)",
               " is not supported (only [\"Linear\"], with an ignore list)");
    if (const std::string f = str(g, "format", gw); !f.empty()) format = f;
    if (g.contains("output_activations") && !g["output_activations"].is_null())
      FS_THROW(gw, " output_activations are not supported");
  }
  const json& w = *weights;
  const std::string ww = where + " weights";
  const std::string type = str(w, "type", ww), strategy = str(w, "strategy", ww);
  const int bits = integer(w, {"num_bits"}, 0, ww);
  c->ignore = strings(q, "ignore", where);
  if (format == "float-quantized" && type == "float" && bits == 8) {
    c->format = strategy == "block" ? QuantFormat::kBlockFp8 : QuantFormat::kFp8;
    if (strategy != "block" && strategy != "channel" && strategy != "tensor")
      FS_THROW(where, " FP8 weights strategy \"", strategy,
               "\" is not supported (tensor, channel, block)");
    if (strategy == "block") {
      const json b = w.value("block_structure", json());
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
          b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0 || b[0].get<int64_t>() > 4096 ||
          b[1].get<int64_t>() > 4096)
        FS_THROW(where, " block_structure ", b.dump(), " is not supported (two positive sizes)");
      c->block_rows = b[0].get<int>();
      c->block_cols = b[1].get<int>();
      c->scale_suffix = "weight_scale";
    }
    return;  // activations stay bf16 (weight-only), as for HF FP8 checkpoints
  }
  if (format != "pack-quantized")
    FS_THROW(where, " format \"", format, "\" is not supported (pack-quantized int4 or "
             "float-quantized FP8)");
  if (type != "int")
    FS_THROW(where, " pack-quantized weights of type \"", type, "\" are not supported (int)");
  check_bits(bits, ww);
  for (const auto& [name, g] : q["config_groups"].items())
    if (g.contains("input_activations") && !g["input_activations"].is_null())
      FS_THROW(where, " config_groups.", name, " quantizes input_activations: only "
               "weight-only int4 (W4A16) is supported");
  c->format = QuantFormat::kPackedInt4;
  c->sym = flag(w, "symmetric", true, ww);
  if (strategy == "channel") {
    c->group_size = -1;
  } else if (strategy == "group") {
    c->group_size = integer(w, {"group_size"}, 0, ww);
    check_group_size(c->group_size, ww);
  } else {
    FS_THROW(where, " weights strategy \"", strategy, "\" is not supported (group or channel)");
  }
  // actorder "group"/"weight" stores weight_g_idx; the loader reads it where it is present.
  const json a = w.value("actorder", json());
  c->desc_act = a.is_string() || (a.is_boolean() && a.get<bool>());
}

// Microscaling formats other than MXFP4, as quantization_config's quant_method names them
// (ModelOpt's NVFP4 checkpoints say "modelopt" and name the format in quant_algo).
bool is_other_microscaling(const std::string& method) {
  for (const char* m : {"nvfp4", "mxfp8", "mxfp6", "mxint8", "fp4", "w4a4_nvfp4", "w4a4_mxfp4"})
    if (method == m) return true;
  return false;
}

}  // namespace

QuantConfig read_quant_config(const json& j, const std::string& path) {
  QuantConfig c;
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return c;
  const json& q = j["quantization_config"];
  if (!q.is_object()) FS_THROW(path, ": \"quantization_config\" must be an object or null");
  const std::string where = path + ": quantization_config";
  const std::string method =
      q.contains("quant_method") && q["quant_method"].is_string() ? q["quant_method"].get<std::string>()
                                                                  : "";
  if (method == "fp8") read_fp8(q, where, &c);
  else if (method == "gptq") read_gptq(q, where, &c);
  else if (method == "awq") read_awq(q, where, &c);
  else if (method == "compressed-tensors") read_compressed(q, where, &c);
  else if (method == "mxfp4") c.format = QuantFormat::kMxfp4;  // only the experts; the rest plain
  else if (method == "modelopt")
    FS_THROW(where, " quant_method \"modelopt\" (quant_algo ",
             q.contains("quant_algo") ? q["quant_algo"].dump() : "(missing)", ") is not "
             "supported: of the microscaling formats flashserve runs only MXFP4 (gpt-oss's "
             "\"mxfp4\"), not NVFP4 or MXFP8");
  else if (is_other_microscaling(method))
    FS_THROW(where, " quant_method \"", method, "\" is not supported: of the microscaling "
             "formats flashserve runs only MXFP4 (gpt-oss's \"mxfp4\"), not NVFP4, MXFP8, MXFP6 "
             "or MXINT8");
  else
    FS_THROW(where, " quant_method ", q.contains("quant_method") ? q["quant_method"].dump() : "(missing)",
             " is not supported (only \"fp8\", \"gptq\", \"awq\", \"compressed-tensors\" and, "
             "for gpt-oss, \"mxfp4\"; "
             "or use a bf16, f16 or f32 checkpoint)");
  const bool fp8 = c.format == QuantFormat::kFp8 || c.format == QuantFormat::kBlockFp8;
  c.method = fp8 ? "fp8" : method;
  for (const std::string& e : c.ignore) {
    if (e.rfind("re:", 0) != 0 || c.ignore_substrings) continue;
    // std::regex compiles recursively: a bound on the length bounds its stack depth.
    if (e.size() > 256) FS_THROW(where, " ignore entry of ", e.size(), " characters is too long");
    try {
      std::regex check(e.substr(3));
    } catch (const std::regex_error&) {
      FS_THROW(where, " ignore entry \"", e, "\" is not a valid regular expression");
    }
  }
  return c;
}

bool stores_quantized(const QuantConfig& q, const std::string& name) {
  if (q.format == QuantFormat::kNone || !is_fp8_projection(name)) return false;
  const std::string suffix = ".weight";
  const std::string module = name.substr(0, name.size() - suffix.size());  // ...mlp.up_proj
  for (const std::string& e : q.ignore) {
    if (e.empty()) continue;  // read_quant_config checked the regular expressions
    if (q.ignore_substrings ? module.find(e) != std::string::npos
        : e.rfind("re:", 0) == 0 ? std::regex_match(module, std::regex(e.substr(3)))
                                 : module == e)
      return false;
  }
  if (q.only_in_block.empty()) return true;
  for (const std::string& m : q.only_in_block)
    if (module.size() > m.size() && module.compare(module.size() - m.size(), m.size(), m) == 0 &&
        module[module.size() - m.size() - 1] == '.')
      return true;
  return false;
}

std::string describe_quantization(const QuantConfig& q) {
  switch (q.format) {
    case QuantFormat::kNone: return "unquantized weights";
    case QuantFormat::kFp8: return "FP8 weights";
    case QuantFormat::kMxfp4: return "MXFP4 experts";
    case QuantFormat::kBlockFp8:
      return str_cat("block-wise FP8 weights (blocks ", q.block_rows, "x", q.block_cols, ")");
    default:
      return str_cat(q.method, " int4 weights (group ", q.group_size,
                     q.sym ? ", symmetric" : ", asymmetric", q.desc_act ? ", act-order" : "", ")");
  }
}

}  // namespace flashserve
