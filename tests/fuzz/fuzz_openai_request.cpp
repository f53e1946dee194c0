// Fuzzes the POST /v1/completions and /v1/chat/completions parsers and validators
// (server/endpoints/completions_request.cpp, chat_request.cpp, server/api/request_fields.cpp) with the real stories260K tokenizer
// and the built-in ChatML template: every input goes through both. Any body gives either a
// CompletionRequest that satisfies every limit the engine relies on, or an ApiError with a 4xx
// status whose envelope serialises.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "server/endpoints/chat_request.h"
#include "server/endpoints/completions_request.h"
#include "tests/fuzz/fuzz_chat_model.h"
#include "tests/fuzz/fuzz_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashserve;

namespace {

void check(const std::variant<CompletionRequest, ApiError>& parsed, const ServedModel& model,
           int max_logprobs) {
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    FUZZ_ASSERT(e->status == 400 || e->status == 404, "error status");
    FUZZ_ASSERT(!e->message.empty(), "empty error message");
    const std::string text = dump_json(error_json(*e));  // invalid UTF-8 in messages must not throw
    FUZZ_ASSERT(!text.empty(), "envelope");
    return;
  }
  const CompletionRequest& r = std::get<CompletionRequest>(parsed);
  FUZZ_ASSERT(!r.prompts.empty() && r.prompts.size() == r.echo_texts.size(), "prompts");
  FUZZ_ASSERT(r.n >= 1 && r.prompts.size() * size_t(r.n) <= size_t(kMaxChoices), "choices");
  FUZZ_ASSERT(r.max_tokens >= 0, "max_tokens");
  for (const auto& p : r.prompts) {
    FUZZ_ASSERT(!p.empty(), "empty prompt");
    FUZZ_ASSERT(int64_t(p.size()) + r.max_tokens <= model.max_model_len, "context");
    for (int32_t id : p) FUZZ_ASSERT(id >= 0 && id < model.vocab_size, "token id");
  }
  FUZZ_ASSERT(r.stop.size() <= size_t(kMaxStops), "stop count");
  for (const auto& s : r.stop) FUZZ_ASSERT(!s.empty() && s.size() <= kMaxStopBytes, "stop length");
  const SamplingParams& s = r.sampling;
  FUZZ_ASSERT(s.temperature >= 0 && s.temperature <= 2, "temperature");
  FUZZ_ASSERT(s.top_p > 0 && s.top_p <= 1, "top_p");
  FUZZ_ASSERT(s.top_k >= 0 && s.min_p >= 0 && s.min_p <= 1, "top_k/min_p");
  FUZZ_ASSERT(std::isfinite(s.repetition_penalty) && s.repetition_penalty > 0, "rep penalty");
  for (const auto& [id, bias] : s.logit_bias) {
    FUZZ_ASSERT(id >= 0 && id < model.vocab_size && std::fabs(bias) <= 100, "logit_bias");
  }
  FUZZ_ASSERT(r.logprobs >= -1 && r.logprobs <= max_logprobs, "logprobs");
  FUZZ_ASSERT(r.sampling.logprobs == r.logprobs, "sampler logprobs");
  FUZZ_ASSERT(!r.include_usage || r.stream, "stream_options");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer* tok = &fuzz::stories_tokenizer();
  const ServedModel& model = fuzz::chatml_model();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  check(parse_completion_request(body, model, *tok), model, kMaxLogprobs);
  auto chat = parse_chat_request(body, model, *tok);
  if (auto* r = std::get_if<CompletionRequest>(&chat)) {
    FUZZ_ASSERT(r->format == ResponseFormat::kChat && r->prompts.size() == 1 && !r->echo,
                "chat request shape");
  }
  check(chat, model, kMaxTopLogprobs);
  return 0;
}
