// Matcher: token acceptance byte by byte, and the next-token mask as a depth-first walk of the
// vocabulary trie with the lazily built automaton, cached per parser state in the grammar.
#include "structured/matcher.h"

#include <algorithm>

#include "core/error.h"
#include "structured/completion.h"

namespace flashserve::structured {

namespace {
constexpr int32_t kStopMarker = -3;          // history entry: a stop token was accepted
constexpr size_t kCompactSets = 4096;        // between calls, past this the automaton restarts
constexpr size_t kCompactNodes = 1 << 20;
constexpr size_t kMaxSetsInOneWalk = 65536;  // about 64 MiB of transitions: a hostile grammar

bool is_stop(const TokenVocabulary& v, int32_t id) {
  return std::find(v.stop_ids.begin(), v.stop_ids.end(), id) != v.stop_ids.end();
}
}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), automaton_(grammar_->grammar()) {
  history_.push_back(automaton_.initial());
}

bool Matcher::is_accepting() const {
  return !terminated_ && automaton_.accepting(history_.back());
}

void Matcher::compact_if_large() {
  if (automaton_.num_sets() < kCompactSets && automaton_.num_nodes() < kCompactNodes) return;
  std::vector<std::string> keys;
  for (int32_t s : history_) keys.push_back(automaton_.key(s));
  automaton_.clear();
  for (size_t i = 0; i < keys.size(); ++i) history_[i] = automaton_.import(keys[i]);
}

bool Matcher::accept_token(int32_t id) {
  const TokenVocabulary& vocab = grammar_->trie().vocabulary();
  if (terminated_ || id < 0 || id >= vocab.vocab_size()) return false;
  if (is_stop(vocab, id)) {
    if (!automaton_.accepting(history_.back())) return false;
    terminated_ = true;
    return true;
  }
  const std::string& bytes = vocab.token_bytes[id];
  if (bytes.empty()) return false;
  compact_if_large();
  int32_t s = history_.back();
  for (char c : bytes) {
    s = automaton_.step(s, static_cast<uint8_t>(c));
    if (s == StackAutomaton::kDead) return false;
  }
  history_.push_back(s);
  return true;
}

bool Matcher::rollback(int n) {
  const int available = static_cast<int>(history_.size()) - 1 + (terminated_ ? 1 : 0);
  if (n < 0 || n > available) return false;
  if (n > 0 && terminated_) {
    terminated_ = false;
    --n;
  }
  history_.resize(history_.size() - n);
  return true;
}

void Matcher::fill_next_token_mask(uint32_t* bitmask) {
  const TokenVocabulary& vocab = grammar_->trie().vocabulary();
  if (terminated_) {
    std::fill(bitmask, bitmask + mask_words(), 0u);
    for (int32_t id : vocab.stop_ids) bitmask[id / 32] |= 1u << (id % 32);
    return;
  }
  compact_if_large();
  const std::string key = automaton_.key(history_.back());
  if (auto hit = grammar_->mask_cache().get(key)) {
    std::copy(hit->begin(), hit->end(), bitmask);
    return;
  }
  compute_mask(bitmask);
  grammar_->mask_cache().put(key, std::make_shared<const std::vector<uint32_t>>(bitmask, bitmask + mask_words()));
}

void Matcher::compute_mask(uint32_t* bitmask) {
  const VocabTrie& trie = grammar_->trie();
  const auto& nodes = trie.nodes();
  const auto& sorted = trie.sorted_tokens();
  std::fill(bitmask, bitmask + mask_words(), 0u);
  const int32_t start = history_.back();
  walk_.assign(trie.max_depth() + 1, StackAutomaton::kDead);
  walk_[0] = start;
  const size_t sets_before = automaton_.num_sets();
  for (size_t i = 0; i < nodes.size();) {
    const VocabTrie::Node& n = nodes[i];
    const int32_t s = automaton_.step(walk_[n.depth - 1], n.byte);
    if (s == StackAutomaton::kDead) {
      i = n.subtree_end;  // no token below here can be allowed
      continue;
    }
    walk_[n.depth] = s;
    for (uint32_t t = n.tokens_begin; t < n.tokens_end; ++t)
      bitmask[sorted[t] / 32] |= 1u << (sorted[t] % 32);
    ++i;
    if (automaton_.num_sets() - sets_before > kMaxSetsInOneWalk)
      FS_THROW("structured output: the grammar needs too many parser states for one token mask");
  }
  if (automaton_.accepting(start))
    for (int32_t id : trie.vocabulary().stop_ids) bitmask[id / 32] |= 1u << (id % 32);
}

std::string Matcher::forced_bytes() {
  std::string out;
  if (terminated_) return out;
  int32_t s = history_.back();
  while (!automaton_.accepting(s) && out.size() < 256) {
    int32_t only = StackAutomaton::kDead, count = 0, byte = 0;
    for (int b = 0; b < 256 && count < 2; ++b) {
      const int32_t next = automaton_.step(s, static_cast<uint8_t>(b));
      if (next != StackAutomaton::kDead) only = next, byte = b, ++count;
    }
    if (count != 1) break;
    out += static_cast<char>(byte);
    s = only;
  }
  return out;
}

std::string Matcher::shortest_completion(size_t max_bytes) {
  std::string out;
  if (terminated_) return out;
  int32_t s = history_.back();
  int64_t d = automaton_.distance_to_accept(s);
  while (d > 0 && d < kNoCompletion && out.size() < max_bytes) {
    int32_t next = StackAutomaton::kDead;
    for (int b = 0; b < 256 && next == StackAutomaton::kDead; ++b) {
      const int32_t n = automaton_.step(s, static_cast<uint8_t>(b));
      if (n != StackAutomaton::kDead && automaton_.distance_to_accept(n) == d - 1) {
        next = n;
        out += static_cast<char>(b);
      }
    }
    if (next == StackAutomaton::kDead) break;
    s = next;
    --d;
  }
  return out;
}

}  // namespace flashserve::structured
