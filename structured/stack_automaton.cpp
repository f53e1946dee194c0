// StackAutomaton: closure (expanding rule calls until every stack top is a byte set), steps,
// interning, and the grammar-wide key of a set.
#include "structured/stack_automaton.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "structured/completion.h"

namespace flashserve::structured {

namespace {
// An ambiguous grammar can make sets grow without bound; past this a step fails instead of
// stalling the engine.
constexpr size_t kMaxStacksPerSet = 8192;
}  // namespace

StackAutomaton::StackAutomaton(const Grammar& grammar) : g_(grammar) {}

void StackAutomaton::clear() {
  nodes_.clear();
  node_index_.clear();
  sets_.clear();
  accepting_.clear();
  set_index_.clear();
  transitions_.clear();
  visited_.clear();
}

int32_t StackAutomaton::node(int32_t pos, int32_t parent) {
  const uint64_t k = (static_cast<uint64_t>(pos) << 32) | static_cast<uint32_t>(parent + 1);
  auto [it, added] = node_index_.emplace(k, static_cast<int32_t>(nodes_.size()));
  if (added) {
    nodes_.push_back(Node{pos, parent});
    visited_.push_back(0);
  }
  return it->second;
}

void StackAutomaton::closure(int32_t stack, std::vector<int32_t>& out, bool& accept) {
  if (visited_[stack] == stamp_) return;
  visited_[stack] = stamp_;
  const Node n = nodes_[stack];
  const Element& e = g_.elements[n.pos];
  switch (e.kind) {
    case Element::Kind::kBytes:
      out.push_back(stack);
      return;
    case Element::Kind::kEnd:
      if (n.parent < 0) accept = true;
      else closure(n.parent, out, accept);
      return;
    case Element::Kind::kRule: {
      // A call in tail position returns straight to the caller's parent: repetition written as
      // right recursion keeps the stack (and so the set) the same size.
      const bool tail = g_.elements[n.pos + 1].kind == Element::Kind::kEnd;
      const int32_t ret = tail ? n.parent : node(n.pos + 1, n.parent);
      for (int32_t alt : g_.rules[e.id]) {
        const int32_t child = node(alt, ret);
        closure(child, out, accept);
      }
      return;
    }
  }
}

int32_t StackAutomaton::intern_set(std::vector<int32_t>& stacks, bool accept) {
  if (stacks.empty() && !accept) return kDead;
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > kMaxStacksPerSet)
    FS_THROW("structured output: the grammar is too ambiguous (", stacks.size(), " parses at once)");
  std::string k(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(int32_t));
  k += accept ? 'A' : 'N';
  auto [it, added] = set_index_.emplace(std::move(k), static_cast<int32_t>(sets_.size()));
  if (added) {
    sets_.push_back(stacks);
    accepting_.push_back(accept ? 1 : 0);
    transitions_.resize(sets_.size() * 256, kUnknown);
  }
  return it->second;
}

int32_t StackAutomaton::initial() {
  std::vector<int32_t> out;
  bool accept = false;
  ++stamp_;
  for (int32_t alt : g_.rules[g_.root]) closure(node(alt, -1), out, accept);
  return intern_set(out, accept);
}

int32_t StackAutomaton::compute_step(int32_t set, uint8_t byte) {
  std::vector<int32_t> out;
  bool accept = false;
  ++stamp_;
  // sets_ may grow inside closure's interning of nodes only; copy the ids first.
  const std::vector<int32_t> stacks = sets_[set];
  for (int32_t s : stacks) {
    const Node n = nodes_[s];
    if (!g_.byte_sets[g_.elements[n.pos].id].test(byte)) continue;
    closure(node(n.pos + 1, n.parent), out, accept);
  }
  return intern_set(out, accept);
}

std::string StackAutomaton::key(int32_t set) const {
  // Each stack as its positions from the top down; sorted, so the key does not depend on ids.
  std::vector<std::vector<int32_t>> stacks;
  for (int32_t s : sets_[set]) {
    std::vector<int32_t> positions;
    for (int32_t k = s; k >= 0; k = nodes_[k].parent) positions.push_back(nodes_[k].pos);
    stacks.push_back(std::move(positions));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string out(1, accepting_[set] ? 'A' : 'N');
  for (const auto& st : stacks) {
    const int32_t len = static_cast<int32_t>(st.size());
    out.append(reinterpret_cast<const char*>(&len), sizeof len);
    out.append(reinterpret_cast<const char*>(st.data()), st.size() * sizeof(int32_t));
  }
  return out;
}

int32_t StackAutomaton::import(const std::string& key) {
  std::vector<int32_t> stacks;
  const bool accept = key[0] == 'A';
  for (size_t i = 1; i < key.size();) {
    int32_t len;
    std::memcpy(&len, key.data() + i, sizeof len);
    i += sizeof len;
    std::vector<int32_t> positions(len);
    std::memcpy(positions.data(), key.data() + i, len * sizeof(int32_t));
    i += len * sizeof(int32_t);
    int32_t parent = -1;
    for (int32_t k = len; k-- > 0;) parent = node(positions[k], parent);
    stacks.push_back(parent);
  }
  return intern_set(stacks, accept);
}

int64_t StackAutomaton::distance_to_accept(int32_t set) {
  if (accepting_[set]) return 0;
  if (suffix_min_.empty()) suffix_min_ = suffix_min_lengths(g_);
  int64_t best = kNoCompletion;
  for (int32_t s : sets_[set]) {
    int64_t total = 0;
    for (int32_t k = s; k >= 0; k = nodes_[k].parent) total = std::min(kNoCompletion, total + suffix_min_[nodes_[k].pos]);
    best = std::min(best, total);
  }
  return best;
}

}  // namespace flashserve::structured
