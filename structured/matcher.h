// One sequence's position in a CompiledGrammar: which tokens may come next (a bitmask over the
// vocabulary), and advancing by the token sampled. Stop tokens are allowed exactly where the
// grammar accepts; a token that would break the grammar is refused and changes nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/compiled_grammar.h"
#include "structured/stack_automaton.h"

namespace flashserve::structured {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances by one token; false (and no change) when the grammar does not allow it. A stop token
  // is allowed only when accepting, and ends the matcher.
  bool accept_token(int32_t id);
  // Sets bit (id % 32) of bitmask[id / 32] for every allowed token id, clears the others.
  void fill_next_token_mask(uint32_t* bitmask /* [mask_words()] */);
  size_t mask_words() const { return grammar_->trie().mask_words(); }

  bool is_accepting() const;    // a stop token may come now
  bool is_terminated() const { return terminated_; }  // a stop token was accepted
  // Undoes the last n accepted tokens (stop included); false if fewer were accepted.
  bool rollback(int n);
  // The shortest bytes that complete the output from here (empty when accepting), up to max_bytes.
  std::string shortest_completion(size_t max_bytes = 4096);
  // Bytes that must follow now whatever is sampled (e.g. a required key): lets a caller skip ahead.
  std::string forced_bytes();

 private:
  void compact_if_large();
  void compute_mask(uint32_t* bitmask);

  std::shared_ptr<const CompiledGrammar> grammar_;
  StackAutomaton automaton_;
  std::vector<int32_t> history_;  // automaton set after each accepted token; [0]: the start
  bool terminated_ = false;
  std::vector<int32_t> walk_;     // per trie depth, reused by compute_mask
};

}  // namespace flashserve::structured
