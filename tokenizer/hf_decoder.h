// tokenizer.json decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
// As in HF, a decoder maps the list of token strings to a new list (Fuse and ByteLevel make it
// one string); the decoded text is the final list joined.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/hf_json.h"

namespace flashserve::hf {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  virtual bool has_byte_fallback() const { return false; }
};

// Null for a null "decoder"; throws flashserve::Error naming an unsupported type.
std::unique_ptr<Decoder> parse_decoder(const json& j);

}  // namespace flashserve::hf
