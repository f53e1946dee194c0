// A tiny deterministic Tokenizer for pure-function tests: ids 3..258 are the bytes 0..255
// (piece "<0xNN>"), 259.. are whole words with a leading "▁". BOS = 1, EOS = 2.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::testing {

class FakeTokenizer : public Tokenizer {
 public:
  std::vector<std::string> words = {"\xE2\x96\x81Once", "\xE2\x96\x81upon", "\xE2\x96\x81" "a"};
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(1);
    for (unsigned char c : text) {
      if (c == 0xFF) FS_THROW("invalid UTF-8");
      ids.push_back(3 + c);
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= 3 && id < 259) out.push_back(static_cast<char>(id - 3));
      if (id >= 259) out += ' ' + words[id - 259].substr(3);
    }
    if (!out.empty() && out[0] == ' ') out.erase(0, 1);
    return sanitize(out);
  }
  // As SentencePiece does: bytes that do not form valid UTF-8 become U+FFFD, one per byte.
  static std::string sanitize(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      size_t n = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c & 0xF0) == 0xE0 ? 3
               : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
      bool ok = n > 0 && i + n <= s.size();
      for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (ok) {
        out.append(s, i, n);
        i += n;
      } else {
        out += "\xEF\xBF\xBD";
        ++i;
      }
    }
    return out;
  }
  std::string piece(int32_t id) const override {
    if (id == 1) return "<s>";
    if (id == 2) return "</s>";
    if (id >= 259) return words[id - 259];
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", id - 3);
    return buf;
  }
  std::vector<SpecialToken> special_tokens() const override { return {{"</s>", 2}, {"<s>", 1}}; }
  int vocab_size() const override { return 259 + static_cast<int>(words.size()); }
  int bos_id() const override { return 1; }
  int eos_id() const override { return 2; }
};

}  // namespace flashserve::testing
