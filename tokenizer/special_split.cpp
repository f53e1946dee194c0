// encode_with_special_tokens (see special_split.h). Tokenizer::encode_chat_prompt's default, for
// tokenizers without a pipeline of their own for it: one left-to-right scan over the text. At each
// byte the special texts starting with it are tried longest first (special_tokens() is sorted
// that way). A match wholly outside the message ranges becomes its id. A match that touches a
// message range must stay characters, but tokenizers recognise some special texts inside plain
// text themselves (SentencePiece user-defined pieces, tokenizer.json added tokens), so the text is
// cut after the occurrence's first character: no encode() call sees it whole (a special text of
// one character cannot be cut; no tokenizer we know has one).
#include "tokenizer/special_split.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

namespace flashserve {

namespace {

// encode(text) for text that continues earlier text. SentencePiece puts a "▁" (a space) before
// the first piece of every encode() call; encoding behind a newline, which no piece merges with,
// and dropping the newline's own ids avoids it. Where the newline's ids are not a clean prefix,
// plain encode() it is.
std::vector<int32_t> encode_continuation(const Tokenizer& tokenizer, std::string_view text) {
  const std::vector<int32_t> lead = tokenizer.encode("\n", false);
  std::string led(1, '\n');
  led.append(text);
  std::vector<int32_t> ids = tokenizer.encode(led, false);
  if (!lead.empty() && ids.size() > lead.size() &&
      std::equal(lead.begin(), lead.end(), ids.begin())) {
    return std::vector<int32_t>(ids.begin() + static_cast<long>(lead.size()), ids.end());
  }
  return tokenizer.encode(text, false);
}

// The first range that ends after `begin`.
ByteRanges::const_iterator first_ending_after(const ByteRanges& ranges, size_t begin) {
  return std::upper_bound(ranges.begin(), ranges.end(), begin,
                          [](size_t b, const auto& r) { return b < r.second; });
}

}  // namespace

bool touches_ranges(const ByteRanges& ranges, size_t begin, size_t end) {
  const auto it = first_ending_after(ranges, begin);
  return it != ranges.end() && it->first < end;
}

bool within_one_range(const ByteRanges& ranges, size_t begin, size_t end) {
  const auto it = first_ending_after(ranges, begin);
  return it != ranges.end() && it->first <= begin && end <= it->second;
}

std::vector<int32_t> encode_with_special_tokens(const Tokenizer& tokenizer, std::string_view text,
                                                const ByteRanges& literal) {
  return tokenizer.encode_chat_prompt(text, literal);
}

std::vector<int32_t> Tokenizer::encode_chat_prompt(std::string_view text,
                                                   const ByteRanges& literal) const {
  const Tokenizer& tokenizer = *this;
  // Special tokens by first byte, keeping the longest-first order within each bucket.
  std::array<std::vector<SpecialToken>, 256> by_first;
  for (SpecialToken& t : tokenizer.special_tokens()) {
    if (!t.text.empty()) by_first[static_cast<unsigned char>(t.text[0])].push_back(std::move(t));
  }
  std::vector<int32_t> ids;
  size_t chunk = 0;          // start of the text not yet encoded
  bool continues = false;    // that text continues a cut occurrence (no leading "▁")
  auto flush = [&](size_t end) {
    if (end > chunk) {
      const std::string_view part = text.substr(chunk, end - chunk);
      std::vector<int32_t> p = continues ? encode_continuation(tokenizer, part)
                                         : tokenizer.encode(part, false);
      ids.insert(ids.end(), p.begin(), p.end());
    }
    chunk = end;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const SpecialToken* match = nullptr;
    for (const SpecialToken& t : by_first[static_cast<unsigned char>(text[i])]) {
      if (text.compare(i, t.text.size(), t.text) == 0) {
        match = &t;
        break;
      }
    }
    if (!match) continue;
    const size_t end = i + match->text.size();
    const bool touches_message = touches_ranges(literal, i, end);
    if (touches_message) {  // characters: cut after the first code point
      const auto lead = static_cast<unsigned char>(text[i]);
      const size_t cp = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
      flush(std::min(i + cp, text.size()));
      continues = true;
      continue;
    }
    flush(i);
    ids.push_back(match->id);
    chunk = end;
    continues = false;
    i = end - 1;
  }
  flush(text.size());
  return ids;
}

}  // namespace flashserve
