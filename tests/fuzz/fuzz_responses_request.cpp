// Fuzzes the POST /v1/responses reader (server/endpoints/responses_request.cpp, responses_input.cpp and the
// chat parser under them) with the real stories260K tokenizer, the built-in ChatML template and a
// store holding one response ("resp_seed"), so previous_response_id is followed too. Any body
// gives either a chat request within the context with a response object that serialises, or an
// ApiError with a 4xx status whose envelope serialises.
#include <cstdint>
#include <memory>
#include <string>

#include "chat_template/chat_template.h"
#include "server/endpoints/responses_output.h"
#include "server/endpoints/responses_request.h"
#include "server/endpoints/responses_store.h"
#include "tests/fuzz/fuzz_chat_model.h"
#include "tests/fuzz/fuzz_file.h"
#include "tokenizer/tokenizer.h"

using namespace flashserve;
using json = nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer* tok = &fuzz::stories_tokenizer();
  const ServedModel& model = fuzz::chatml_model();
  static ResponsesStore store;
  static const bool seeded = [] {
    store.put("resp_seed",
          {json::parse(R"({"output":[{"type":"message","id":"msg_1","status":"completed",
               "role":"assistant","content":[{"type":"output_text","text":"Hello.",
               "annotations":[],"logprobs":[]}]},{"type":"function_call","id":"fc_1",
               "call_id":"call_1","name":"f","arguments":"{}","status":"completed"}]})"),
           json::parse(R"([{"role":"user","content":"Hi"}])")});
    return true;
  }();
  (void)seeded;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_responses_request(body, model, *tok, store);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    FUZZ_ASSERT(e->status == 400 || e->status == 404, "error status");
    FUZZ_ASSERT(!e->message.empty(), "empty error message");
    FUZZ_ASSERT(!dump_json(error_json(*e)).empty(), "envelope");
    return 0;
  }
  const ResponsesRequest& r = std::get<ResponsesRequest>(parsed);
  FUZZ_ASSERT(r.chat.format == ResponseFormat::kChat && r.chat.prompts.size() == 1, "chat shape");
  FUZZ_ASSERT(r.chat.n == 1 && !r.chat.echo, "one choice, no echo");
  const auto& p = r.chat.prompts[0];
  FUZZ_ASSERT(!p.empty() && int64_t(p.size()) + r.chat.max_tokens <= model.max_model_len, "context");
  FUZZ_ASSERT(r.chat.include_usage == r.chat.stream, "a stream always ends with usage");
  FUZZ_ASSERT(r.turn.id.rfind("resp_", 0) == 0 && r.turn.input_items.is_array(), "turn");
  const json response = response_object(r.turn, "completed", json::array(), nullptr);
  FUZZ_ASSERT(!dump_json(response).empty() && response["store"] == r.turn.store, "response");
  return 0;
}
