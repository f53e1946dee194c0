// encode_with_special_tokens (see special_split.h): one left-to-right scan. Message ranges are
// jumped over whole; elsewhere the special texts starting with the current byte are tried longest
// first (special_tokens() is sorted that way), and one that would end inside a message is not a
// match, so a template's "<s>" right before a user's text cannot swallow the user's bytes.
#include "tokenizer/special_split.h"

#include <algorithm>
#include <array>

namespace flashserve {

std::vector<int32_t> encode_with_special_tokens(
    const Tokenizer& tokenizer, std::string_view text,
    const std::vector<std::pair<size_t, size_t>>& literal) {
  // Special tokens by first byte, keeping the longest-first order within each bucket.
  std::array<std::vector<SpecialToken>, 256> by_first;
  for (SpecialToken& t : tokenizer.special_tokens()) {
    if (!t.text.empty()) by_first[static_cast<unsigned char>(t.text[0])].push_back(std::move(t));
  }
  std::vector<int32_t> ids;
  size_t stretch = 0;  // start of the text not yet encoded
  auto flush = [&](size_t end) {
    if (end > stretch) {
      std::vector<int32_t> part = tokenizer.encode(text.substr(stretch, end - stretch), false);
      ids.insert(ids.end(), part.begin(), part.end());
    }
  };
  size_t next_literal = 0;  // the first literal range that ends after i
  for (size_t i = 0; i < text.size();) {
    while (next_literal < literal.size() && literal[next_literal].second <= i) ++next_literal;
    const bool has_literal = next_literal < literal.size();
    if (has_literal && literal[next_literal].first <= i) {  // inside a message: plain text
      i = literal[next_literal].second;
      continue;
    }
    const size_t limit = has_literal ? literal[next_literal].first : text.size();
    const SpecialToken* match = nullptr;
    for (const SpecialToken& t : by_first[static_cast<unsigned char>(text[i])]) {
      if (i + t.text.size() <= limit && text.compare(i, t.text.size(), t.text) == 0) {
        match = &t;
        break;
      }
    }
    if (!match) {
      ++i;
      continue;
    }
    flush(i);
    ids.push_back(match->id);
    i += match->text.size();
    stretch = i;
  }
  flush(text.size());
  return ids;
}

}  // namespace flashserve
