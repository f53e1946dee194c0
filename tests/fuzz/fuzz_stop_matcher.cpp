// Fuzzes StopMatcher (server/generation/stop_matcher.cpp) with random stops and random chunkings of a random
// text. Whatever the chunking: the output is a prefix of the text with no stop inside it; after a
// match the rest of the text starts with a stop; without a match the output is the whole text.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "server/generation/stop_matcher.h"
#include "tests/fuzz/fuzz_file.h"

using namespace flashserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  std::vector<std::string> stops(in.ConsumeIntegralInRange<int>(0, 6));
  for (auto& s : stops) s = in.ConsumeRandomLengthString(24);
  std::vector<size_t> cuts(in.ConsumeIntegralInRange<int>(0, 64));
  for (auto& c : cuts) c = in.ConsumeIntegralInRange<size_t>(0, 16);
  const std::string text = in.ConsumeRemainingBytesAsString();

  StopMatcher m(stops);
  std::string out;
  size_t pos = 0, k = 0;
  while (pos < text.size() && !m.matched()) {
    size_t n = k < cuts.size() ? cuts[k++] : text.size() - pos;
    n = std::min(n, text.size() - pos);
    out += m.push(std::string_view(text).substr(pos, n));
    pos += n;  // once the cuts run out, n is the rest of the text, so this ends
  }
  if (!m.matched()) out += m.flush();
  if (m.matched()) FUZZ_ASSERT(m.push("more").empty() && m.flush().empty(), "text after a match");

  FUZZ_ASSERT(text.compare(0, out.size(), out) == 0, "output is not a prefix of the text");
  for (const auto& s : stops) {
    if (!s.empty()) FUZZ_ASSERT(out.find(s) == std::string::npos, "a stop inside the output");
  }
  if (m.matched()) {
    bool starts_with_stop = false;
    for (const auto& s : stops) {
      if (!s.empty() && text.compare(out.size(), s.size(), s) == 0) starts_with_stop = true;
    }
    FUZZ_ASSERT(starts_with_stop, "a match that is not at a stop");
  } else {
    FUZZ_ASSERT(out == text, "text lost without a match");
  }
  return 0;
}
