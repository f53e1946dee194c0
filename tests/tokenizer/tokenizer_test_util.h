// Shared data for the tokenizer tests: the two SentencePiece models under FS_MODELS_DIR and a set
// of texts covering ASCII, accents, CJK, emoji (incl. ZWJ and flags), RTL scripts and whitespace;
// and padding ids (a model's vocabulary past its tokenizer's) mixed into id sequences.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace flashserve::test {

inline const std::string kStoriesTokenizer =
    std::string(FS_MODELS_DIR) + "/stories260K/tok512.model";
inline const std::string kLlamaTokenizer =
    std::string(FS_MODELS_DIR) + "/llama2-tokenizer/tokenizer.model";

inline std::vector<std::string> sample_texts() {
  return {
      "Once upon a time, there was a little girl named Lily.",
      "h\u00e9llo w\u00f6rld \u2014 \u00e7a va? na\u00efve caf\u00e9",
      "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002\u4e2d\u6587\u4e5f\u53ef\u4ee5\u3002",
      "emoji: \U0001F600\U0001F44D\U0001F3FD \U0001F1EF\U0001F1F5 family "
      "\U0001F468\u200D\U0001F469\u200D\U0001F467",
      "  two leading spaces",
      "multiple   spaces\tand\ttabs\nnew lines\n\n",
      "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 "
      "\u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629",
      "mixed \U0001F600\u65e5\u672cabc \u00e9 \u20ac100",
      "x\U0001F600y",
      "a",
      " ",
      "",
  };
}

// `ids` with ids in [vocab_size, vocab_size + 300) inserted at random places (a third of the gaps,
// including the start and the end): the rows a model has beyond its tokenizer's vocabulary, which
// must decode to nothing wherever they fall.
inline std::vector<int32_t> with_padding_ids(const std::vector<int32_t>& ids, int vocab_size,
                                             std::mt19937& rng) {
  std::vector<int32_t> out;
  for (size_t i = 0; i <= ids.size(); ++i) {
    if (rng() % 3 == 0) out.push_back(vocab_size + int32_t(rng() % 300));
    if (i < ids.size()) out.push_back(ids[i]);
  }
  return out;
}

}  // namespace flashserve::test
