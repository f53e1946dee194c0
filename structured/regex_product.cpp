// Thompson automata of regex ASTs, their product with a character count (subset construction),
// pruned to the states that can still accept, emitted as grammar rules.
#include "structured/regex_product.h"

#include <algorithm>
#include <map>

#include "structured/schema_error.h"

namespace flashserve::structured {

namespace {

struct Nfa {
  std::vector<std::vector<int32_t>> eps;
  std::vector<std::vector<std::pair<int32_t, int32_t>>> edges;  // (index into sets, target)
  std::vector<CharSet> sets;
  int32_t start = 0, accept = 0;
};

class NfaBuilder {
 public:
  NfaBuilder(const RegexAst& ast, size_t max_states, const std::string& keyword, const std::string& path)
      : ast_(ast), max_states_(max_states), keyword_(keyword), path_(path) {}

  Nfa build() {
    auto [in, out] = fragment(ast_.root);
    nfa_.start = in;
    nfa_.accept = out;
    return std::move(nfa_);
  }

 private:
  int32_t state() {
    if (nfa_.eps.size() >= max_states_)
      throw SchemaError(keyword_, path_, str_cat("the pattern's automaton has more than ", max_states_, " states"));
    nfa_.eps.emplace_back();
    nfa_.edges.emplace_back();
    return static_cast<int32_t>(nfa_.eps.size() - 1);
  }
  void eps(int32_t a, int32_t b) { nfa_.eps[a].push_back(b); }

  // A fresh (entry, exit) pair for the node.
  std::pair<int32_t, int32_t> fragment(int32_t id) {
    const RegexNode& n = ast_.nodes[id];
    switch (n.kind) {
      case RegexNode::Kind::kChars: {
        const int32_t a = state(), b = state();
        nfa_.sets.push_back(n.set);
        nfa_.edges[a].push_back({static_cast<int32_t>(nfa_.sets.size() - 1), b});
        return {a, b};
      }
      case RegexNode::Kind::kSeq: {
        const int32_t a = state();
        int32_t end = a;
        for (int32_t k : n.kids) {
          auto [in, out] = fragment(k);
          eps(end, in);
          end = out;
        }
        return {a, end};
      }
      case RegexNode::Kind::kAlt: {
        const int32_t a = state(), b = state();
        for (int32_t k : n.kids) {
          auto [in, out] = fragment(k);
          eps(a, in);
          eps(out, b);
        }
        return {a, b};
      }
      case RegexNode::Kind::kRepeat: {
        const int32_t a = state();
        int32_t end = a;
        for (int i = 0; i < n.min; ++i) {
          auto [in, out] = fragment(n.kids[0]);
          eps(end, in);
          end = out;
        }
        const int32_t b = state();
        eps(end, b);
        if (n.max < 0) {
          auto [in, out] = fragment(n.kids[0]);
          eps(end, in);
          eps(out, in);
          eps(out, b);
        } else {
          for (int i = n.min; i < n.max; ++i) {  // each further copy is optional
            auto [in, out] = fragment(n.kids[0]);
            eps(end, in);
            eps(out, b);
            end = out;
          }
        }
        return {a, b};
      }
    }
    return {state(), state()};
  }

  const RegexAst& ast_;
  size_t max_states_;
  const std::string& keyword_;
  const std::string& path_;
  Nfa nfa_;
};

// The sorted epsilon closure of a set of states. `seen` holds a mark per state (reused across
// calls: a closure then costs what it visits, not the automaton's size).
std::vector<int32_t> closure(const Nfa& nfa, std::vector<int32_t> todo, std::vector<uint32_t>& seen, uint32_t& mark) {
  seen.resize(nfa.eps.size(), 0);
  ++mark;
  std::vector<int32_t> out;
  while (!todo.empty()) {
    const int32_t s = todo.back();
    todo.pop_back();
    if (seen[s] == mark) continue;
    seen[s] = mark;
    out.push_back(s);
    for (int32_t t : nfa.eps[s]) todo.push_back(t);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct ProductState {
  std::vector<std::vector<int32_t>> sets;  // per regex
  int count = 0;
  bool operator<(const ProductState& o) const { return std::tie(count, sets) < std::tie(o.count, o.sets); }
};

}  // namespace

Sym intersect_regexes(GrammarBuilder& b, const std::vector<RegexAst>& regexes, int min_len, int max_len,
                      CharContext context, const std::string& keyword, const std::string& path,
                      const ProductLimits& limits) {
  std::vector<Nfa> nfas;
  for (const RegexAst& ast : regexes) nfas.push_back(NfaBuilder(ast, limits.max_nfa_states, keyword, path).build());
  std::vector<std::vector<uint32_t>> seen(nfas.size());
  std::vector<uint32_t> marks(nfas.size(), 0);
  auto saturate = [&](int c) { return max_len < 0 ? std::min(c, min_len) : c; };

  std::map<ProductState, int32_t> index;
  std::vector<ProductState> states;
  struct Move {
    CharSet set;
    int32_t to;
  };
  std::vector<std::vector<Move>> moves;
  auto intern = [&](ProductState s) {
    auto [it, fresh] = index.try_emplace(s, static_cast<int32_t>(states.size()));
    if (fresh) {
      if (states.size() >= limits.max_states)
        throw SchemaError(keyword, path, str_cat("more than ", limits.max_states, " states for the pattern with its lengths"));
      states.push_back(std::move(s));
      moves.emplace_back();
    }
    return it->second;
  };
  ProductState start;
  for (size_t r = 0; r < nfas.size(); ++r) start.sets.push_back(closure(nfas[r], {nfas[r].start}, seen[r], marks[r]));
  start.count = saturate(0);
  intern(start);
  for (size_t at = 0; at < states.size(); ++at) {
    const ProductState cur = states[at];
    if (max_len >= 0 && cur.count >= max_len) continue;
    // Elementary intervals between the boundaries of every outgoing set.
    std::vector<uint32_t> cuts;
    for (size_t r = 0; r < nfas.size(); ++r)
      for (int32_t s : cur.sets[r])
        for (auto [set, to] : nfas[r].edges[s])
          for (auto [lo, hi] : nfas[r].sets[set].ranges()) cuts.push_back(lo), cuts.push_back(hi + 1);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    // Intervals with the same targets in every automaton form one move.
    std::map<std::vector<std::vector<int32_t>>, CharSet> groups;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      const uint32_t c = cuts[i];
      std::vector<std::vector<int32_t>> next(nfas.size());
      bool alive = true;
      for (size_t r = 0; r < nfas.size() && alive; ++r) {
        for (int32_t s : cur.sets[r])
          for (auto [set, to] : nfas[r].edges[s])
            if (nfas[r].sets[set].contains(c)) next[r].push_back(to);
        alive = !next[r].empty();
      }
      if (alive) groups[next].add(c, cuts[i + 1] - 1);
    }
    for (auto& [targets, set] : groups) {
      ProductState n;
      for (size_t r = 0; r < nfas.size(); ++r) n.sets.push_back(closure(nfas[r], targets[r], seen[r], marks[r]));
      n.count = saturate(cur.count + 1);
      const int32_t to = intern(std::move(n));
      moves[at].push_back({set, to});
    }
  }
  // Accepting states, then every state that reaches one (backwards).
  std::vector<char> live(states.size(), 0);
  std::vector<std::vector<int32_t>> preds(states.size());
  std::vector<int32_t> todo;
  for (size_t i = 0; i < states.size(); ++i) {
    for (const Move& m : moves[i]) preds[m.to].push_back(static_cast<int32_t>(i));
    bool accepts = states[i].count >= min_len;
    for (size_t r = 0; r < nfas.size(); ++r)
      accepts = accepts && std::binary_search(states[i].sets[r].begin(), states[i].sets[r].end(), nfas[r].accept);
    if (accepts) live[i] = 2, todo.push_back(static_cast<int32_t>(i));
  }
  while (!todo.empty()) {
    const int32_t s = todo.back();
    todo.pop_back();
    for (int32_t p : preds[s])
      if (!live[p]) live[p] = 1, todo.push_back(p);
  }
  if (!live[0]) throw SchemaError(keyword, path, "no string matches the pattern within the lengths");
  b.set_context(keyword, path);
  // One rule per distinct character set: many states move on the same ones.
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, Sym> char_rules;
  auto char_rule = [&](const CharSet& set) {
    auto it = char_rules.find(set.ranges());
    if (it == char_rules.end()) it = char_rules.emplace(set.ranges(), char_set_rule(b, set, context)).first;
    return it->second;
  };
  std::vector<int32_t> rule(states.size(), -1);
  for (size_t i = 0; i < states.size(); ++i)
    if (live[i]) rule[i] = b.new_rule();
  for (size_t i = 0; i < states.size(); ++i) {
    if (!live[i]) continue;
    if (live[i] == 2) b.add_alt(rule[i], {});
    for (const Move& m : moves[i])
      if (live[m.to]) b.add_alt(rule[i], {char_rule(m.set), GrammarBuilder::rule(rule[m.to])});
  }
  return GrammarBuilder::rule(rule[0]);
}

}  // namespace flashserve::structured
