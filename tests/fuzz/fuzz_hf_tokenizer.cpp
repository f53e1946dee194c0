// Fuzzes tokenizer.json support (tokenizer/hf_*.cpp). The first byte (mod 3) picks what the
// rest is:
//   0: a tokenizer.json, written to a scratch file and loaded; a file that loads must then
//      encode and decode a fixed multilingual text;
//   1: the next byte picks one of the seven reference tokenizers (tests/tokenizer/data/hf), the
//      rest is text to encode and, read as ids, to decode;
//   2: the next two bytes pick a reference tokenizer.json and one of its components
//      (normalizer, pre_tokenizer, decoder, post_processor, model options), the rest is JSON that
//      replaces that component (mutations of whole files rarely stay valid JSON; this reaches
//      the component parsers and their use with well-formed but odd values).
// Invariants: bad files and invalid UTF-8 throw flashserve::Error, nothing else; valid UTF-8
// always encodes; encoded ids lie in [0, vocab_size); decode gives valid UTF-8; streaming the
// ids through IncrementalDetokenizer gives exactly decode(ids).
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/fuzz/fuzz_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace flashserve;

namespace {

const char* const kFamilies[] = {"gpt2", "llama3", "qwen2", "llama2", "mistral", "digits", "mixed"};

const Tokenizer& family(size_t i) {
  static std::unique_ptr<Tokenizer> t[7];
  if (!t[i])
    t[i] = Tokenizer::load(std::string(FS_SOURCE_DIR) + "/tests/tokenizer/data/hf/" +
                           kFamilies[i] + "/tokenizer.json");
  return *t[i];
}

// decode(ids) is valid UTF-8, and streaming the ids through the detokenizer gives the same text.
void check_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, const char* what) {
  const std::string all = tok.decode(ids);
  FUZZ_ASSERT(is_valid_utf8(all), (std::string(what) + ": decode is not valid UTF-8").c_str());
  IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += detok.push(id);
  streamed += detok.flush();
  FUZZ_ASSERT(streamed == all, (std::string(what) + ": streamed text != decode(all)").c_str());
}

void check_round_trip(const Tokenizer& tok, const std::string& text) {
  const bool valid = is_valid_utf8(text);
  std::vector<int32_t> ids, parsed;
  try {
    ids = tok.encode(text, true);
    parsed = tok.encode_parsing_special_tokens(text, false);
  } catch (const Error&) {
    FUZZ_ASSERT(!valid, "valid UTF-8 failed to encode");
    return;
  }
  FUZZ_ASSERT(valid, "invalid UTF-8 was encoded");
  for (int32_t id : parsed) FUZZ_ASSERT(id >= 0 && id < tok.vocab_size(), "id out of range");
  for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < tok.vocab_size(), "id out of range");
  check_decode(tok, ids, "encoded text");
}

const std::string& family_json(size_t i) {
  static std::string text[7];
  if (text[i].empty()) {
    std::ifstream in(std::string(FS_SOURCE_DIR) + "/tests/tokenizer/data/hf/" + kFamilies[i] +
                     "/tokenizer.json");
    text[i].assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return text[i];
}

// Loads `file_text` as a tokenizer.json; when it loads, encodes and decodes a fixed text.
void load_and_use(const std::string& file_text) {
  const std::string& path = fuzz::write_scratch(
      "hf", "_tokenizer.json", reinterpret_cast<const uint8_t*>(file_text.data()), file_text.size());
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::load(path);
  } catch (const Error&) {
    return;
  }
  try {
    check_round_trip(*tok, "Hello, w\u00f6rld! 123 \u65e5\u672c \U0001F600 <s> \n\t x");
  } catch (const Error&) {
    // A hostile regex may exceed PCRE2's match limit: an Error, which is the contract.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  if (data[0] % 3 == 0) {
    load_and_use(std::string(reinterpret_cast<const char*>(data + 1), size - 1));
    return 0;
  }
  if (data[0] % 3 == 2) {
    if (size < 3) return 0;
    const auto part = nlohmann::json::parse(data + 3, data + size, nullptr, false);
    if (part.is_discarded()) return 0;
    auto j = nlohmann::json::parse(family_json(data[1] % 7));
    static const char* const kSlots[] = {"normalizer", "pre_tokenizer", "decoder",
                                         "post_processor", "added_tokens"};
    const size_t slot = data[2] % 7;
    if (slot < 5) j[kSlots[slot]] = part;
    else if (slot == 5 && part.is_object()) j["model"].update(part);  // e.g. byte_fallback, unk
    else j["model"]["merges"].push_back(part);
    load_and_use(j.dump());
    return 0;
  }
  const Tokenizer& tok = family(data[1] % 7);
  const std::string text(reinterpret_cast<const char*>(data + 2), size - 2);
  check_round_trip(tok, text);
  std::vector<int32_t> ids;  // the same bytes as ids, two bytes each
  for (size_t i = 2; i + 1 < size; i += 2)
    ids.push_back(int32_t((data[i] | (data[i + 1] << 8)) % uint32_t(tok.vocab_size())));
  check_decode(tok, ids, "arbitrary ids");
  return 0;
}
