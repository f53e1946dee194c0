// Fuzzes the reasoning parser (output_parsers/reasoning_parser.h) with text around <think> tags,
// streamed in random pieces, starting inside the reasoning or not. Invariants: the pieces join to
// the whole-text split, and neither part carries whitespace at its edges.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>

#include "output_parsers/reasoning_parser.h"
#include "tests/fuzz/fuzz_file.h"
#include "tests/fuzz/fuzz_text_pieces.h"

using namespace flashserve;
using namespace flashserve::output_parsers;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool starts_in_reasoning = in.ConsumeBool();
  const std::vector<size_t> sizes = fuzz::consume_cut_sizes(in);
  const std::string text = fuzz::expand_fragments(in.ConsumeRemainingBytesAsString());

  const ReasoningOutput whole = split_reasoning(text, starts_in_reasoning);
  FUZZ_ASSERT(trim_space(whole.reasoning_content) == whole.reasoning_content, "untrimmed reasoning");
  FUZZ_ASSERT(trim_space(whole.content) == whole.content, "untrimmed content");
  ReasoningStream stream(starts_in_reasoning);
  ReasoningOutput joined;
  auto add = [&](const ReasoningOutput& d) {
    joined.reasoning_content += d.reasoning_content;
    joined.content += d.content;
  };
  for (std::string_view piece : fuzz::cut_pieces(text, sizes)) add(stream.push(piece));
  add(stream.finish());
  FUZZ_ASSERT(joined.reasoning_content == whole.reasoning_content, "streamed reasoning differs");
  FUZZ_ASSERT(joined.content == whole.content, "streamed content differs");
  return 0;
}
