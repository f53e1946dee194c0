// The parser: a pushdown automaton over bytes whose configurations are sets of stacks. Stacks are
// hash-consed (a node is a grammar position plus its parent), so equal stacks are equal ids and a
// set of them is one interned id; steps are memoized per (set, byte), which makes the automaton a
// DFA built lazily as the text and the vocabulary walks need it. Per matcher, not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"

namespace flashserve::structured {

class StackAutomaton {
 public:
  static constexpr int32_t kDead = -1;

  explicit StackAutomaton(const Grammar& grammar);  // grammar must outlive this

  int32_t initial();
  int32_t step(int32_t set, uint8_t byte) {
    const size_t i = static_cast<size_t>(set) * 256 + byte;
    if (transitions_[i] == kUnknown) {
      const int32_t next = compute_step(set, byte);  // may grow transitions_
      transitions_[i] = next;
    }
    return transitions_[i];
  }
  bool accepting(int32_t set) const { return accepting_[set] != 0; }

  // A description of the set that is the same in every automaton of the grammar (mask cache key),
  // and the set it describes, re-created here (after clear()).
  std::string key(int32_t set) const;
  int32_t import(const std::string& key);

  // The fewest bytes that take the set to accepting (0 when it accepts); kNoCompletion if unknown.
  int64_t distance_to_accept(int32_t set);

  size_t num_sets() const { return sets_.size(); }
  size_t num_nodes() const { return nodes_.size(); }
  void clear();  // forgets every node and set (ids become invalid)

 private:
  static constexpr int32_t kUnknown = -2;
  struct Node {
    int32_t pos;
    int32_t parent;  // -1: the bottom
  };
  int32_t node(int32_t pos, int32_t parent);
  void closure(int32_t stack, std::vector<int32_t>& out, bool& accept);
  int32_t intern_set(std::vector<int32_t>& stacks, bool accept);
  int32_t compute_step(int32_t set, uint8_t byte);

  const Grammar& g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> node_index_;
  std::vector<std::vector<int32_t>> sets_;  // sorted stack ids (tops are byte sets)
  std::vector<char> accepting_;
  std::unordered_map<std::string, int32_t> set_index_;
  std::vector<int32_t> transitions_;  // [num_sets * 256]
  std::vector<int64_t> suffix_min_;   // completion.h; computed on first use
  std::vector<uint32_t> visited_;     // closure's per-call marks, by node
  uint32_t stamp_ = 0;
};

}  // namespace flashserve::structured
