// The vocabulary as a byte trie laid out in preorder: a node's subtree is the index range
// [node, subtree_end), so a depth-first walk that rejects a byte skips the whole subtree with
// one assignment. Built once per vocabulary; immutable and shared by every grammar.
#pragma once

#include <cstdint>
#include <vector>

#include "structured/token_vocabulary.h"

namespace flashserve::structured {

class VocabTrie {
 public:
  struct Node {
    uint8_t byte;
    uint16_t depth;         // 1 for a token's first byte
    uint32_t subtree_end;   // one past the last node below this one
    uint32_t tokens_begin;  // tokens whose bytes end here: sorted_tokens()[begin, end)
    uint32_t tokens_end;
  };

  explicit VocabTrie(TokenVocabulary vocab);

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& sorted_tokens() const { return sorted_; }
  const TokenVocabulary& vocabulary() const { return vocab_; }
  int vocab_size() const { return vocab_.vocab_size(); }
  int max_depth() const { return max_depth_; }
  size_t mask_words() const { return (vocab_.token_bytes.size() + 31) / 32; }

 private:
  TokenVocabulary vocab_;
  std::vector<Node> nodes_;
  std::vector<int32_t> sorted_;  // token ids with bytes, by their bytes
  int max_depth_ = 0;
};

}  // namespace flashserve::structured
