// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for the regexes a tokenizer.json holds
// (Split pre-tokenizers, Replace normalizers and decoders). PCRE2 understands everything the
// published patterns use (\p{L}, \p{N}, lookahead, possessive and case-insensitive groups), so
// there is no regex engine of our own. Match data is reused per thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace flashserve::hf {

class Regex {
 public:
  // Throws flashserve::Error naming `what` (e.g. "pre_tokenizer Split") if the pattern does not
  // compile.
  Regex(const std::string& pattern, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-overlapping matches in valid UTF-8 `s`, left to right, as [begin, end) byte offsets
  // (replacing `out`'s contents). After an empty match the search moves on one character.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// A literal or a regex, as tokenizer.json's {"String": ...} / {"Regex": ...} patterns.
class Pattern {
 public:
  // Reads {"String": "..."} or {"Regex": "..."}; errors name `what`.
  Pattern(const nlohmann::json& j, const std::string& what);
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
  // Replaces every match in `s` by `content` (the normalizer and the decoder Replace).
  void replace_all(std::string& s, const std::string& content) const;
  bool is_regex() const { return regex_ != nullptr; }
  const std::string& literal() const { return literal_; }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;  // null for a literal
};

}  // namespace flashserve::hf
