// What the grammar engine knows of a vocabulary: the bytes each token adds to the text when it
// follows other tokens, and the stop tokens (allowed only where the grammar accepts). Built once
// per model from its tokenizer, or directly (tests, synthetic vocabularies).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flashserve {
class Tokenizer;
}

namespace flashserve::structured {

struct TokenVocabulary {
  // [vocab_size]: empty for tokens a grammar never allows (special tokens, padding ids).
  std::vector<std::string> token_bytes;
  std::vector<int32_t> stop_ids;
  int vocab_size() const { return static_cast<int>(token_bytes.size()); }
};

// Each token's bytes in the middle of a text: SentencePiece and Metaspace pieces with '▁' as a
// space, "<0xNN>" byte-fallback pieces as that one byte (a part of a UTF-8 character), byte-level
// BPE pieces mapped back through GPT-2's byte table. Special tokens and ids >= the tokenizer's
// vocabulary (up to model_vocab_size) get no bytes, except those in spelled_ids, which are their
// text (harmony's <|constrain|> and <|message|>, written inside a forced call's grammar). stop_ids:
// the tokenizer's EOS and any extra.
TokenVocabulary vocabulary_from_tokenizer(const Tokenizer& tokenizer, int model_vocab_size,
                                          std::vector<int32_t> extra_stop_ids = {},
                                          const std::vector<int32_t>& spelled_ids = {});

}  // namespace flashserve::structured
