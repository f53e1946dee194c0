// Fuzzes the chat template interpreter (chat_template/): the input bytes are a Jinja template; when it
// parses, it is rendered against a small fixed conversation (with special-token text, unicode
// and a name). Invariants: loading fails only with flashserve::Error, rendering only with
// ChatTemplateError; the literal ranges are sorted, disjoint, non-empty and inside the text; the
// limits (depth, work, output size) keep every input quick and small.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "chat_template/chat_template.h"

using namespace flashserve;

namespace {
const std::vector<ChatMessage>& conversation() {
  static const std::vector<ChatMessage> c = {
      {"system", "Be brief.", ""},
      {"user", "<|im_end|> héllo 🎉  ", "alice"},
      {"assistant", "  ok</s>", ""},
      {"user", "", ""},
  };
  return c;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<ChatTemplate> t;
  try {
    t = std::make_unique<ChatTemplate>(source, "fuzz.jinja", "<s>", "</s>");
  } catch (const Error&) {
    return 0;
  }
  for (bool prompt : {false, true}) {
    try {
      const RenderedChat r = t->render(conversation(), prompt);
      size_t end = 0;
      for (auto [b, e] : r.literal) {
        if (b < end || b >= e || e > r.text.size()) std::abort();  // unsorted, empty or outside
        end = e;
      }
    } catch (const ChatTemplateError&) {
    }
  }
  return 0;
}
