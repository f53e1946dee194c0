// The tokenizer.json BPE model: vocabulary, ranked merges, byte fallback, unknown token and
// ignore_merges. Encoding one pre-tokenized piece starts from its characters and applies the
// lowest-ranked applicable merge first (leftmost on ties) with a heap over a linked list of
// symbols; results are cached per piece in a bounded per-thread cache.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/hf_json.h"

namespace flashserve::hf {

// Hash for string-keyed maps looked up by string_view without building a string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  explicit Bpe(const json& model);  // the "model" object; throws flashserve::Error if unusable

  // Appends the ids of one piece.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  const StringMap& vocab() const { return vocab_; }
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }  // "" for holes
  int32_t unk_id() const { return unk_id_; }
  bool fuse_unk() const { return fuse_unk_; }

 private:
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  StringMap vocab_;
  std::vector<std::string> id_to_token_;
  struct Merge {
    int32_t rank, new_id;
  };
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  int32_t unk_id_ = -1;
  int32_t byte_ids_[256];  // <0xNN> ids for byte fallback, -1 when missing
  bool byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false;
  uint64_t serial_;  // tells this model's cache entries from another's in the per-thread cache
};

}  // namespace flashserve::hf
