// Fuzzes the matcher (structured/matcher.h): a schema from a small fixed set, then tokens of a
// synthetic vocabulary chosen by the input. Each step the mask must agree with accept_token for
// the chosen token, a refused token must change nothing, the stop token must be allowed exactly
// when accepting, and rollback must restore the earlier mask.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "structured/matcher.h"
#include "tests/fuzz/fuzz_file.h"

using namespace flashserve::structured;

namespace {
const char* kSchemas[] = {
    R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":300},"b":{"type":"string","maxLength":4}},"required":["a"]})",
    R"({"type":"array","items":{"anyOf":[{"type":"boolean"},{"type":"null"},{"type":"string","pattern":"^x[0-9]+$"}]},"maxItems":3})",
    R"({"$defs":{"n":{"type":"object","properties":{"c":{"type":"array","items":{"$ref":"#/$defs/n"}}}}},"$ref":"#/$defs/n"})",
    R"({"enum":["é€", 1.5, null, {"k":[1]}]})",
    R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":40,"multipleOf":4},"b":{"type":"boolean"}},"additionalProperties":{"type":"null"},"minProperties":2,"maxProperties":3})",
    R"({"type":"object","propertyNames":{"enum":["x1","k"]},"additionalProperties":{"type":"string","pattern":"[0-9]","minLength":1,"maxLength":3},"dependentRequired":{"x1":["k"]}})",
    R"({"type":"array","items":{"type":["string","integer"],"not":{"type":"string"}},"maxItems":2})",
    R"({"type":"string","format":"date","pattern":"^2","maxLength":10})",
    R"({})"};

std::shared_ptr<const VocabTrie> vocabulary() {
  TokenVocabulary v;
  for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"{\"", "\":", "\",", "\"}", "[{", "]}", "true", "null", "12", "\xC3", "\xE2\x82\xAC", "x1"})
    v.token_bytes.push_back(t);
  v.token_bytes.push_back("");
  v.stop_ids = {static_cast<int32_t>(v.token_bytes.size() - 1)};
  return std::make_shared<const VocabTrie>(std::move(v));
}

bool allowed(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id / 32] >> (id % 32)) & 1u; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static GrammarCompiler compiler(vocabulary());
  FuzzedDataProvider in(data, size);
  auto g = compiler.json_schema(kSchemas[in.ConsumeIntegralInRange<size_t>(0, std::size(kSchemas) - 1)]);
  const int32_t vocab = g->trie().vocab_size();
  Matcher m(g);
  std::vector<uint32_t> mask(m.mask_words()), again(m.mask_words());
  int accepted = 0;
  while (in.remaining_bytes() > 0 && !m.is_terminated()) {
    m.fill_next_token_mask(mask.data());
    FUZZ_ASSERT(allowed(mask, vocab - 1) == m.is_accepting(), "stop allowed exactly when accepting");
    const int32_t id = in.ConsumeIntegralInRange<int32_t>(0, vocab - 1);
    const bool ok = m.accept_token(id);
    FUZZ_ASSERT(ok == allowed(mask, id), "mask and accept_token agree");
    if (!ok) {
      m.fill_next_token_mask(again.data());
      FUZZ_ASSERT(again == mask, "a refused token changes nothing");
      continue;
    }
    ++accepted;
    if (in.ConsumeBool() && accepted > 0) {
      FUZZ_ASSERT(m.rollback(1), "rollback");
      --accepted;
      m.fill_next_token_mask(again.data());
      FUZZ_ASSERT(again == mask, "rollback restores the mask");
      FUZZ_ASSERT(m.accept_token(id), "the token is accepted again");
      ++accepted;
    }
  }
  return 0;
}
