// tokenizer.json added tokens: their flags, and the split of a text on their occurrences the way
// HF's AddedVocabulary does it (leftmost-longest match; single_word, lstrip, rstrip), with a
// filter deciding which occurrences of special tokens become ids (none, all, or, for a rendered
// chat prompt, those wholly outside the message texts).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashserve::hf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = true;
};

// Which occurrences of special tokens become their ids; a refused one stays text.
struct SpecialFilter {
  enum class Mode { kNone, kAll, kOutsideMessages };
  Mode mode = Mode::kNone;
  // kOutsideMessages: byte ranges of the text being split that came from messages (sorted,
  // disjoint); an occurrence touching one stays text.
  const std::vector<std::pair<size_t, size_t>>* messages = nullptr;

  bool allows(size_t begin, size_t end) const;
  // Where the search goes on after a refused occurrence [begin, end): past it (HF's
  // encode_special_tokens mode), except after one straddling a message's edge, whose tail the
  // template wrote and may start a special text of its own: the next character.
  size_t resume_after_refused(std::string_view text, size_t begin, size_t end) const;
};

// Leftmost-longest matching over a set of added tokens (HF builds an Aho-Corasick automaton).
class AddedMatcher {
 public:
  // `token` must outlive the matcher. An empty pattern is ignored.
  void add(std::string pattern, const AddedToken* token);
  void finish();  // call once, after the last add()

  // Splits `text` into runs of text (on_text(run, run_starts_text)) and added-token ids
  // (appended to `out`), in order. `at_start`: `text` begins the original text.
  template <class OnText>
  void split(std::string_view text, bool at_start, const SpecialFilter& specials, OnText&& on_text,
             std::vector<int32_t>& out) const {
    size_t start = 0;  // end of the last token taken (after its rstrip)
    size_t pos = 0;    // where the search goes on
    while (pos < text.size()) {
      size_t b = 0;
      const Entry* hit = find(text, pos, b);
      if (hit == nullptr) break;
      size_t e = b + hit->pattern.size();
      const AddedToken& tok = *hit->token;
      if (tok.special && !specials.allows(b, e)) {
        pos = specials.resume_after_refused(text, b, e);
        continue;
      }
      pos = e;
      if (tok.single_word && !at_word_boundaries(text, b, e)) continue;
      if (b < start) continue;  // inside the previous token's rstrip
      if (tok.lstrip) b = std::max(start, last_non_space_end(text, start, b));
      if (tok.rstrip) e = first_non_space(text, e);
      if (b > start) on_text(text.substr(start, b - start), at_start && start == 0);
      out.push_back(tok.id);
      start = e;
    }
    if (start < text.size()) on_text(text.substr(start), at_start && start == 0);
  }

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  // The longest entry matching at the first position >= pos where any matches (its offset in `b`).
  const Entry* find(std::string_view text, size_t pos, size_t& b) const;
  static bool at_word_boundaries(std::string_view s, size_t b, size_t e);
  static size_t last_non_space_end(std::string_view s, size_t from, size_t b);
  static size_t first_non_space(std::string_view s, size_t e);

  std::vector<Entry> entries_;                      // longest pattern first
  std::array<std::vector<int32_t>, 256> by_first_;  // entries_ indices by first byte
};

}  // namespace flashserve::hf
