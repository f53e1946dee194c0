// Builds the preorder trie from the tokens sorted by their bytes: each token adds the nodes past
// its common prefix with the token before it, which is exactly preorder.
#include "structured/vocab_trie.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve::structured {

VocabTrie::VocabTrie(TokenVocabulary vocab) : vocab_(std::move(vocab)) {
  const auto& bytes = vocab_.token_bytes;
  for (int32_t id = 0; id < vocab_.vocab_size(); ++id)
    if (!bytes[id].empty()) sorted_.push_back(id);
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes[a] != bytes[b] ? bytes[a] < bytes[b] : a < b;
  });
  std::vector<uint32_t> path;  // path[d]: the node at depth d + 1 on the current branch
  const std::string* prev = nullptr;
  for (size_t k = 0; k < sorted_.size(); ++k) {
    const std::string& s = bytes[sorted_[k]];
    FS_CHECK(s.size() < 65535, "token ", sorted_[k], " is too long for the vocabulary trie");
    size_t common = 0;
    if (prev != nullptr)
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    // Close the nodes deeper than the common prefix.
    while (path.size() > common) {
      nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(Node{static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0,
                            static_cast<uint32_t>(k), static_cast<uint32_t>(k)});
    }
    Node& end = nodes_[path.back()];
    if (end.tokens_begin == end.tokens_end) end.tokens_begin = static_cast<uint32_t>(k);
    end.tokens_end = static_cast<uint32_t>(k + 1);
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    prev = &s;
  }
  for (uint32_t n : path) nodes_[n].subtree_end = static_cast<uint32_t>(nodes_.size());
}

}  // namespace flashserve::structured
