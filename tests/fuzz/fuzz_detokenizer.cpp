// Fuzzes IncrementalDetokenizer (tokenizer/incremental_detokenizer.cpp) with random id streams
// and context splits over both SentencePiece models (tok512 and the 32000-piece Llama-2 one, whose
// byte-fallback pieces make partial UTF-8 likely). Invariants: each delta is valid UTF-8, and the
// deltas concatenate to decode(all ids) minus decode(context) (a suffix of decode(all) starting at
// a character when the context ends inside a character). Ids outside the vocabulary throw
// flashserve::Error and leave the detokenizer usable.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/fuzz/fuzz_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace flashserve;

namespace {
const Tokenizer& tokenizer(int which) {
  static std::unique_ptr<Tokenizer> t[2] = {
      Tokenizer::load(std::string(FS_MODELS_DIR) + "/stories260K/tok512.model"),
      Tokenizer::load(std::string(FS_MODELS_DIR) + "/llama2-tokenizer/tokenizer.model")};
  return *t[which];
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const Tokenizer& tok = tokenizer(in.ConsumeBool() ? 1 : 0);
  const int vocab = tok.vocab_size();
  const size_t num_context = in.ConsumeIntegralInRange<size_t>(0, 8);
  std::vector<int32_t> ids;
  // Ids pushed between the real ones: negative (must throw) or past the vocabulary (padding rows
  // of the model: must decode to nothing, so the stream still equals decode of the real ids).
  std::vector<int32_t> bad;
  while (in.remaining_bytes() > 0 && ids.size() < 256) {
    const uint8_t kind = in.ConsumeIntegral<uint8_t>();
    if (kind < 8) {  // a byte piece <0x..> (ids 3..258 in both models)
      ids.push_back(3 + in.ConsumeIntegral<uint8_t>());
    } else if (kind < 10 && ids.size() >= num_context) {
      bad.push_back(in.ConsumeBool() ? vocab + in.ConsumeIntegral<uint8_t>() : -1);
      ids.push_back(-1);  // marker, not an id
    } else {
      ids.push_back(int32_t(in.ConsumeIntegralInRange<uint32_t>(0, uint32_t(vocab - 1))));
    }
  }
  std::vector<int32_t> context, real;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) continue;
    (i < num_context ? context : real).push_back(ids[i]);
  }
  IncrementalDetokenizer d(tok, context);
  std::string text;
  size_t next_bad = 0;
  for (size_t i = num_context; i < ids.size(); ++i) {
    std::string delta;
    if (ids[i] < 0) {
      const int32_t id = bad[next_bad++];
      if (id >= vocab) {  // padding: accepted, adds no text of its own
        delta = d.push(id);
        FUZZ_ASSERT(is_valid_utf8(delta), "delta is not valid UTF-8");
        text += delta;
        continue;
      }
      bool threw = false;
      try {
        d.push(id);
      } catch (const Error&) {
        threw = true;
      }
      FUZZ_ASSERT(threw, "a negative id was accepted");
      continue;
    }
    delta = d.push(ids[i]);
    FUZZ_ASSERT(is_valid_utf8(delta), "delta is not valid UTF-8");
    text += delta;
  }
  const std::string tail = d.flush();
  FUZZ_ASSERT(is_valid_utf8(tail), "flush is not valid UTF-8");
  text += tail;

  std::vector<int32_t> all = context;
  all.insert(all.end(), real.begin(), real.end());
  const std::string whole = tok.decode(all);
  const std::string ctx = tok.decode(context);
  if (whole.compare(0, ctx.size(), ctx) == 0) {
    FUZZ_ASSERT(text == whole.substr(ctx.size()), "stream != decode(all) - decode(context)");
  } else {
    FUZZ_ASSERT(text.size() <= whole.size() &&
                    whole.compare(whole.size() - text.size(), text.size(), text) == 0,
                "stream is not a suffix of decode(all)");
  }
  return 0;
}
