// tokenizer.json normalizers: NFC, NFKC (utf8proc), Prepend, Replace (literal or regex) and
// Sequence. A normalizer rewrites one piece of valid UTF-8 text (the text between added tokens).
#pragma once

#include <memory>
#include <string>

#include "tokenizer/hf_json.h"

namespace flashserve::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
  // True when it can make text shorter by an unbounded factor (a Replace by something shorter),
  // so that no bound on bytes per token holds.
  virtual bool can_shrink() const { return false; }
};

// Null for a null "normalizer"; throws flashserve::Error naming an unsupported type.
std::unique_ptr<Normalizer> parse_normalizer(const json& j);

}  // namespace flashserve::hf
