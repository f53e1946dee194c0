// Fuzzes the tool-call parsers (output_parsers/) with model-like text in each format, streamed in
// random pieces. Invariants: the stream's events have OpenAI's delta shape and join to exactly the
// whole-text parse; every call has a name and its arguments appear verbatim in the text.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>

#include "output_parsers/tool_call_parser.h"
#include "tests/fuzz/fuzz_file.h"
#include "tests/fuzz/fuzz_text_pieces.h"
#include "tests/output_parsers/stream_join.h"

using namespace flashserve;
using namespace flashserve::output_parsers;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const auto format = static_cast<ToolCallFormat>(in.ConsumeIntegralInRange<int>(0, 3));
  const uint64_t seed = in.ConsumeIntegral<uint64_t>();
  const std::vector<size_t> sizes = fuzz::consume_cut_sizes(in);
  const std::string text = fuzz::expand_fragments(in.ConsumeRemainingBytesAsString());

  const ParsedOutput whole = parse_tool_calls(format, text, seed);
  for (const ToolCall& c : whole.tool_calls) {
    FUZZ_ASSERT(!c.name.empty(), "a call without a name");
    FUZZ_ASSERT(text.find(c.arguments) != std::string::npos, "arguments not from the text");
  }
  const auto joined = testing::join_tool_call_stream(format, seed, fuzz::cut_pieces(text, sizes));
  FUZZ_ASSERT(joined.problem.empty(), joined.problem.c_str());
  FUZZ_ASSERT(testing::parse_difference(joined.output, whole).empty(), "stream != whole parse");
  return 0;
}
