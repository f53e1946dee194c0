// Fuzzes the harmony parser (output_parsers/harmony_parser.h) with text built from harmony's
// markers and header words, streamed in random pieces. Invariants: the pieces join to the
// whole-text parse in OpenAI's delta shape, and every call goes to an offered function.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "output_parsers/harmony_parser.h"
#include "tests/fuzz/fuzz_file.h"
#include "tests/fuzz/fuzz_text_pieces.h"
#include "tests/output_parsers/stream_join.h"

using namespace flashserve;
using namespace flashserve::output_parsers;

namespace {

// Bytes 1-15 stand for the markers and header words, so that random inputs reach headers.
std::string expand_harmony(const std::string& raw) {
  static const char* const kFragments[16] = {
      "",           "<|start|>",   "<|end|>",      "<|message|>", "<|channel|>", "<|constrain|>",
      "<|return|>", "<|call|>",    "assistant",    "analysis",    "final",       "commentary",
      " to=functions.f", " to=functions.g", "json", "{\"a\": \"é\"}"};
  std::string text;
  for (char c : raw) {
    const auto b = static_cast<unsigned char>(c);
    text += b > 0 && b < 16 ? std::string(kFragments[b]) : std::string(1, c);
  }
  return text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::vector<std::string> functions = {"f"};  // g is never offered
  const std::vector<size_t> sizes = fuzz::consume_cut_sizes(in);
  const std::string text = expand_harmony(in.ConsumeRemainingBytesAsString());

  const HarmonyOutput whole = parse_harmony(text, functions, 3);
  for (const ToolCall& c : whole.tool_calls) FUZZ_ASSERT(c.name == "f", "a call to g");
  HarmonyStream stream(functions, 3);
  std::string reasoning;
  testing::JoinedStream joined;
  auto take = [&](const HarmonyDelta& d) {
    reasoning += d.reasoning_content;
    testing::join_events(d.events, joined);
  };
  for (std::string_view piece : fuzz::cut_pieces(text, sizes)) take(stream.push(piece));
  take(stream.finish());
  FUZZ_ASSERT(joined.problem.empty(), "a stream event out of shape");
  FUZZ_ASSERT(reasoning == whole.reasoning_content, "streamed reasoning differs");
  FUZZ_ASSERT(testing::parse_difference(joined.output, {whole.content, whole.tool_calls}).empty(),
              "streamed content or calls differ");
  return 0;
}
