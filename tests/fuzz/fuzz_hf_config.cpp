// Fuzzes config.json loading (weights/hf_config.cpp): any text either gives a ModelConfig that
// passes validate_config and survives a round trip through hf_config_json, or throws
// flashserve::Error.
#include <cstdint>

#include "core/error.h"
#include "tests/fuzz/fuzz_file.h"
#include "weights/hf_config.h"
#include "weights/llama_tensors.h"

using namespace flashserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::write_scratch("cfg", "_config.json", data, size);
  ModelConfig c;
  try {
    c = read_hf_config(path);
  } catch (const Error&) {
    return 0;
  }
  validate_config(c, "fuzz");  // must not throw for a config read_hf_config accepted
  FUZZ_ASSERT(c.hidden_size > 0 && c.num_q_heads > 0 && c.num_kv_heads > 0, "sizes");
  FUZZ_ASSERT(c.num_q_heads % c.num_kv_heads == 0, "gqa");
  const std::string again = hf_config_json(c);
  const std::string& path2 = fuzz::write_scratch("cfg2", "_config.json",
                                                 reinterpret_cast<const uint8_t*>(again.data()),
                                                 again.size());
  ModelConfig d = read_hf_config(path2);
  FUZZ_ASSERT(d.hidden_size == c.hidden_size && d.num_layers == c.num_layers &&
                  d.head_dim == c.head_dim && d.vocab_size == c.vocab_size &&
                  d.eos_token_ids == c.eos_token_ids && d.rope_scaling.type == c.rope_scaling.type,
              "round trip");
  return 0;
}
