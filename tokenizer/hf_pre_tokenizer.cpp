// tokenizer.json pre-tokenizers (see hf_pre_tokenizer.h). The splitting rules follow HF's
// SplitDelimiterBehavior: the text is cut into alternating delimiter / non-delimiter spans, then
// delimiters are removed, kept apart, merged with the span before or after, or runs of them joined.
#include "tokenizer/hf_pre_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_sequence.h"
#include "tokenizer/hf_text.h"

namespace flashserve::hf {

namespace {

// The GPT-2 pattern ByteLevel uses when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j, const std::string& component) {
  const std::string b = field<std::string>(j, "behavior", "Isolated", component);
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  config_error(component + ": behavior '" + b + "' is not supported");
}

struct Span {
  size_t begin, end;
  bool delim;
};

// Cuts piece `p` at `matches` (sorted, non-overlapping) and appends the results to `out`.
void split_piece(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches,
                 Behavior behavior, bool invert, std::vector<Piece>& out) {
  std::vector<Span> spans;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < p.text.size() || spans.empty()) spans.push_back({prev, p.text.size(), invert});

  std::vector<Span> merged;  // delim here means "drop" (Removed) and nothing otherwise
  switch (behavior) {
    case Behavior::Removed:
      merged = spans;
      break;
    case Behavior::Isolated:
      for (const Span& s : spans) merged.push_back({s.begin, s.end, false});
      break;
    case Behavior::Contiguous: {
      bool prev_delim = false;
      for (const Span& s : spans) {
        if (!merged.empty() && s.delim == prev_delim) merged.back().end = s.end;
        else merged.push_back({s.begin, s.end, false});
        prev_delim = s.delim;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev_delim = false;
      for (const Span& s : spans) {
        if (s.delim && !prev_delim && !merged.empty()) merged.back().end = s.end;
        else merged.push_back({s.begin, s.end, false});
        prev_delim = s.delim;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev_delim = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.delim && !prev_delim && !merged.empty()) merged.back().begin = s.begin;
        else merged.push_back({s.begin, s.end, false});
        prev_delim = s.delim;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  for (const Span& s : merged) {
    if (s.delim || s.end == s.begin) continue;
    out.push_back({p.text.substr(s.begin, s.end - s.begin), p.at_start && s.begin == 0});
  }
}

class Split final : public PreTokenizer {
 public:
  explicit Split(const json& j)
      : pattern_(required(j, "pattern", "pre_tokenizer Split"), "pre_tokenizer Split"),
        behavior_(parse_behavior(j, "pre_tokenizer Split")),
        invert_(field<bool>(j, "invert", false, "pre_tokenizer Split")) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 2);
    std::vector<std::pair<size_t, size_t>> matches;
    for (const Piece& p : pieces) {
      pattern_.find_all(p.text, matches);
      split_piece(p, matches, behavior_, invert_, out);
    }
    pieces = std::move(out);
  }
  bool can_drop_text() const override { return behavior_ == Behavior::Removed; }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// ByteLevel: optional leading space, optional GPT-2 split, then every byte as its printable char.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const json& j)
      : add_prefix_space_(field<bool>(j, "add_prefix_space", true, "pre_tokenizer ByteLevel")) {
    if (field<bool>(j, "use_regex", true, "pre_tokenizer ByteLevel"))
      regex_ = std::make_unique<Regex>(kGpt2Pattern, "pre_tokenizer ByteLevel");
  }
  void apply(std::vector<Piece>& pieces) const override {
    const ByteLevelTable& table = byte_level_table();
    std::vector<Piece> split;
    std::vector<std::pair<size_t, size_t>> matches;
    for (Piece& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
      if (regex_) {
        regex_->find_all(p.text, matches);
        split_piece(p, matches, Behavior::Isolated, false, split);
      } else if (!p.text.empty()) {
        split.push_back(std::move(p));
      }
    }
    for (Piece& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char c : p.text) mapped += table.byte_to_char[c];
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { Always, First, Never };

PrependScheme parse_prepend_scheme(const json& j, const std::string& component) {
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string s = field<std::string>(j, "prepend_scheme", "always", component);
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    config_error(component + ": prepend_scheme '" + s + "' is not supported");
  }
  // Files written before prepend_scheme existed say add_prefix_space.
  return field<bool>(j, "add_prefix_space", true, component) ? PrependScheme::Always
                                                             : PrependScheme::Never;
}

std::string metaspace_replacement(const json& j, const std::string& component) {
  const std::string r = field<std::string>(j, "replacement", "\u2581", component);
  if (r.empty() || utf8_sequence_length(r, 0) != r.size())
    config_error(component + ": replacement must be one character");
  return r;
}

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  explicit MetaspacePreTokenizer(const json& j)
      : replacement_(metaspace_replacement(j, "pre_tokenizer Metaspace")),
        scheme_(parse_prepend_scheme(j, "pre_tokenizer Metaspace")),
        split_(field<bool>(j, "split", true, "pre_tokenizer Metaspace")) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    std::vector<std::pair<size_t, size_t>> matches;
    for (Piece& p : pieces) {
      std::string t;
      t.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ') t += replacement_;
        else t += c;
      }
      const bool starts = t.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::Always ||
                      (scheme_ == PrependScheme::First && p.at_start)))
        t.insert(0, replacement_);
      p.text = std::move(t);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        continue;
      }
      matches.clear();
      for (size_t pos = p.text.find(replacement_); pos != std::string::npos;
           pos = p.text.find(replacement_, pos + replacement_.size()))
        matches.emplace_back(pos, pos + replacement_.size());
      split_piece(p, matches, Behavior::MergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

// Cuts each piece at every character `is_delimiter` holds for, one match per character (as HF's
// splitting on a char predicate), then applies `behavior`.
template <class IsDelimiter>
void split_chars(std::vector<Piece>& pieces, Behavior behavior, IsDelimiter&& is_delimiter) {
  std::vector<Piece> out;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Piece& p : pieces) {
    matches.clear();
    for_each_char(p.text, [&](uint32_t cp, size_t at, size_t n) {
      if (is_delimiter(cp)) matches.emplace_back(at, at + n);
    });
    split_piece(p, matches, behavior, false, out);
  }
  pieces = std::move(out);
}

// Digits: numeric characters (Unicode N*) apart from the rest, one by one or in runs.
class Digits final : public PreTokenizer {
 public:
  explicit Digits(const json& j)
      : individual_(field<bool>(j, "individual_digits", false, "pre_tokenizer Digits")) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_chars(pieces, individual_ ? Behavior::Isolated : Behavior::Contiguous, [](uint32_t cp) {
      const auto cat = utf8proc_category(utf8proc_int32_t(cp));
      return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL ||
             cat == UTF8PROC_CATEGORY_NO;
    });
  }

 private:
  bool individual_;
};

// Punctuation (Falcon): ASCII punctuation (Rust's is_ascii_punctuation, which takes in symbols
// such as '$' and '+') and Unicode punctuation (P*) as delimiters, by `behavior`.
class Punctuation final : public PreTokenizer {
 public:
  explicit Punctuation(const json& j) : behavior_(parse_behavior(j, "pre_tokenizer Punctuation")) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_chars(pieces, behavior_, [](uint32_t cp) {
      if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) ||
                            (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
      const auto cat = utf8proc_category(utf8proc_int32_t(cp));
      return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
    });
  }
  bool can_drop_text() const override { return behavior_ == Behavior::Removed; }

 private:
  Behavior behavior_;
};

class PreTokenizerSequence final : public StageSequence<PreTokenizer> {
 public:
  explicit PreTokenizerSequence(const json& j)
      : StageSequence(j, "pretokenizers", "pre_tokenizer Sequence", parse_pre_tokenizer) {}
  void apply(std::vector<Piece>& pieces) const override { run_all(&PreTokenizer::apply, pieces); }
  bool can_drop_text() const override { return any_step(&PreTokenizer::can_drop_text); }
};

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "pre_tokenizer");
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j);
  if (type == "Split") return std::make_unique<Split>(j);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(j);
  if (type == "Digits") return std::make_unique<Digits>(j);
  if (type == "Punctuation") return std::make_unique<Punctuation>(j);
  if (type == "Sequence") return std::make_unique<PreTokenizerSequence>(j);
  unsupported("pre_tokenizer", type);
}

}  // namespace flashserve::hf
