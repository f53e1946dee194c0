// tokenizer.json pre-tokenizers: ByteLevel, Split, Metaspace, Digits, Punctuation and Sequence.
// Each one splits (and may rewrite) a list of pieces; the BPE model then encodes every piece on
// its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/hf_json.h"

namespace flashserve::hf {

struct Piece {
  std::string text;
  bool at_start = false;  // begins at offset 0 of the original text (Metaspace "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` with their split; empty pieces are dropped, as in HF.
  virtual void apply(std::vector<Piece>& pieces) const = 0;
  // True when it can drop text (a Split or Punctuation with behavior Removed).
  virtual bool can_drop_text() const { return false; }
};

// Null for a null "pre_tokenizer"; throws flashserve::Error naming an unsupported type.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j);

}  // namespace flashserve::hf
