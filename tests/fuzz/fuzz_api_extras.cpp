// Fuzzes the readers of POST /v1/embeddings, /tokenize and /detokenize (server/endpoints/embeddings.cpp,
// server/endpoints/tokenize.cpp) with the real stories260K tokenizer and the built-in ChatML template; every
// input goes through all three. Any body gives either a value that satisfies the limits the engine
// relies on, or an ApiError with a 4xx status whose envelope serialises.
#include <cstdint>
#include <string>
#include <variant>

#include "server/endpoints/embeddings.h"
#include "server/endpoints/tokenize.h"
#include "tests/fuzz/fuzz_chat_model.h"
#include "tests/fuzz/fuzz_file.h"

using namespace flashserve;

namespace {

template <class T>
void check_error(const std::variant<T, ApiError>& r) {
  if (auto* e = std::get_if<ApiError>(&r)) {
    FUZZ_ASSERT(e->status >= 400 && e->status < 500, "error status");
    FUZZ_ASSERT(!e->message.empty(), "empty error message");
    FUZZ_ASSERT(!dump_json(error_json(*e)).empty(), "envelope");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ServedModel model = [] {
    ServedModel m = fuzz::chatml_model();
    m.embedding_dimensions = 64;
    return m;
  }();
  const Tokenizer& tok = fuzz::stories_tokenizer();
  const std::string_view body(reinterpret_cast<const char*>(data), size);

  auto e = parse_embeddings_request(body, model, tok);
  check_error(e);
  if (auto* r = std::get_if<EmbeddingsRequest>(&e)) {
    FUZZ_ASSERT(!r->inputs.empty() && r->inputs.size() <= kMaxEmbeddingInputs, "input count");
    for (const auto& ids : r->inputs) {
      FUZZ_ASSERT(!ids.empty() && int(ids.size()) <= model.max_model_len, "input length");
      for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < model.vocab_size, "token id");
    }
    FUZZ_ASSERT(r->dimensions >= 0 && r->dimensions <= model.embedding_dimensions, "dimensions");
  }
  auto t = tokenize_response(body, model, tok);
  check_error(t);
  if (auto* j = std::get_if<nlohmann::json>(&t)) FUZZ_ASSERT(!dump_json(*j).empty(), "tokens");
  auto d = detokenize_response(body, model, tok);
  check_error(d);
  if (auto* j = std::get_if<nlohmann::json>(&d)) FUZZ_ASSERT(!dump_json(*j).empty(), "text");
  return 0;
}
