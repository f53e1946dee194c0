// tokenizer.json added tokens (see hf_added_tokens.h): the matcher's search and the character
// rules of single_word (word characters are Rust's alphanumerics and '_') and lstrip/rstrip
// (whitespace is Rust's char::is_whitespace), as HF applies them.
#include "tokenizer/hf_added_tokens.h"

#include <utf8proc.h>

#include "tokenizer/hf_text.h"
#include "tokenizer/special_split.h"

namespace flashserve::hf {

namespace {

bool is_word_char(uint32_t cp) {
  if (cp == '_') return true;
  const auto c = utf8proc_category(utf8proc_int32_t(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

// Length of the character at s[i] (1 for a stray byte, which validated text never holds).
size_t char_length(std::string_view s, size_t i) {
  const size_t n = utf8_sequence_length(s, i);
  return n == 0 ? 1 : n;
}

}  // namespace

bool SpecialFilter::allows(size_t begin, size_t end) const {
  switch (mode) {
    case Mode::kNone: return false;
    case Mode::kAll: return true;
    case Mode::kOutsideMessages: return !touches_ranges(*messages, begin, end);
  }
  return false;
}

size_t SpecialFilter::resume_after_refused(std::string_view text, size_t begin, size_t end) const {
  if (mode != Mode::kOutsideMessages || within_one_range(*messages, begin, end)) return end;
  return begin + char_length(text, begin);
}

void AddedMatcher::add(std::string pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  entries_.push_back({std::move(pattern), token});
}

void AddedMatcher::finish() {
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    return a.pattern.size() > b.pattern.size();
  });
  for (size_t i = 0; i < entries_.size(); ++i)
    by_first_[static_cast<unsigned char>(entries_[i].pattern[0])].push_back(int32_t(i));
}

const AddedMatcher::Entry* AddedMatcher::find(std::string_view text, size_t pos, size_t& b) const {
  for (b = pos; b < text.size(); ++b)
    for (int32_t idx : by_first_[static_cast<unsigned char>(text[b])]) {
      const Entry& e = entries_[size_t(idx)];
      if (text.compare(b, e.pattern.size(), e.pattern) == 0) return &e;
    }
  return nullptr;
}

bool AddedMatcher::at_word_boundaries(std::string_view s, size_t b, size_t e) {
  if (b > 0) {  // the character before b
    size_t i = b - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    const size_t n = utf8_sequence_length(s, i);
    if (n > 0 && is_word_char(decode_utf8(s, i, n))) return false;
  }
  if (e < s.size()) {
    const size_t n = utf8_sequence_length(s, e);
    if (n > 0 && is_word_char(decode_utf8(s, e, n))) return false;
  }
  return true;
}

// End of the last non-whitespace character in s[from, b), or `from` when all is whitespace.
size_t AddedMatcher::last_non_space_end(std::string_view s, size_t from, size_t b) {
  size_t end = from;
  for_each_char(s.substr(from, b - from), [&](uint32_t cp, size_t at, size_t n) {
    if (!is_white_space(cp)) end = from + at + n;
  });
  return end;
}

size_t AddedMatcher::first_non_space(std::string_view s, size_t e) {
  size_t i = e;
  while (i < s.size()) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || !is_white_space(decode_utf8(s, i, n))) break;
    i += n;
  }
  return i;
}

}  // namespace flashserve::hf
