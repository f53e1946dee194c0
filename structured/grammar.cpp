// GrammarBuilder: rules and combinators, flattening, and the left-recursion check.
#include "structured/grammar.h"

#include <utility>

#include "structured/schema_error.h"

namespace flashserve::structured {

void GrammarBuilder::set_context(std::string keyword, std::string path) {
  keyword_ = std::move(keyword);
  path_ = std::move(path);
}

void GrammarBuilder::charge(size_t n) {
  size_ += n;
  if (size_ > max_elements_)
    throw SchemaError(keyword_, path_,
                      str_cat("the grammar grows past its limit of ", max_elements_,
                              " elements (repetition counts, lengths or enum too large)"));
}

int32_t GrammarBuilder::new_rule() {
  charge(1);
  alts_.emplace_back();
  return static_cast<int32_t>(alts_.size() - 1);
}

void GrammarBuilder::add_alt(int32_t rule, const Seq& seq) {
  charge(seq.size() + 1);
  alts_[rule].push_back(seq);
}

int32_t GrammarBuilder::rule_of(const std::vector<Seq>& alts) {
  int32_t r = new_rule();
  for (const Seq& s : alts) add_alt(r, s);
  return r;
}

Sym GrammarBuilder::bytes(const ByteSet& set) {
  std::string key = set.to_string();
  auto it = set_index_.find(key);
  if (it != set_index_.end()) return Sym{false, it->second};
  sets_.push_back(set);
  int32_t id = static_cast<int32_t>(sets_.size() - 1);
  set_index_.emplace(std::move(key), id);
  return Sym{false, id};
}

Sym GrammarBuilder::byte(uint8_t b) { return byte_range(b, b); }

Sym GrammarBuilder::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int c = lo; c <= hi; ++c) s.set(c);
  return bytes(s);
}

Seq GrammarBuilder::literal(std::string_view text) {
  Seq seq;
  for (char c : text) seq.push_back(byte(static_cast<uint8_t>(c)));
  return seq;
}

Sym GrammarBuilder::empty() {
  if (empty_rule_ < 0) empty_rule_ = rule_of({Seq{}});
  return rule(empty_rule_);
}

Sym GrammarBuilder::optional(const Seq& seq) { return rule(rule_of({seq, Seq{}})); }

Sym GrammarBuilder::star(const Seq& seq) {
  int32_t r = new_rule();
  Seq loop = seq;
  loop.push_back(rule(r));  // right recursion: the parser keeps its stack flat (tail call)
  add_alt(r, loop);
  add_alt(r, Seq{});
  return rule(r);
}

Sym GrammarBuilder::repeat(const Seq& seq, int min, int max) {
  Seq out;
  for (int i = 0; i < min; ++i) {
    charge(seq.size());
    out.insert(out.end(), seq.begin(), seq.end());
  }
  if (max < 0) {
    out.push_back(star(seq));
  } else if (max > min) {
    // (seq (seq (seq)?)?)?: nested optionals, so at most max - min more copies.
    Seq tail;
    for (int i = 0; i < max - min; ++i) {
      Seq inner = seq;
      inner.insert(inner.end(), tail.begin(), tail.end());
      tail = {optional(inner)};
    }
    out.insert(out.end(), tail.begin(), tail.end());
  }
  return rule(rule_of({out}));
}

Grammar GrammarBuilder::build(int32_t root) {
  const size_t n = alts_.size();
  // Nullable rules (fixpoint), then "rule A can start with rule B" edges past nullable prefixes.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Seq& s : alts_[r]) {
        bool all = true;
        for (const Sym& x : s) all = all && x.is_rule && nullable[x.id];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<int32_t>> first(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& s : alts_[r])
      for (const Sym& x : s) {
        if (!x.is_rule) break;
        first[r].push_back(x.id);
        if (!nullable[x.id]) break;
      }
  // Iterative DFS (a hostile pattern can make long chains): a back edge is left recursion.
  std::vector<char> mark(n, 0);  // 0 new, 1 on the DFS path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;
  for (size_t start = 0; start < n; ++start) {
    if (mark[start] != 0) continue;
    mark[start] = 1;
    path.emplace_back(static_cast<int32_t>(start), 0);
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == first[r].size()) {
        mark[r] = 2;
        path.pop_back();
        continue;
      }
      int32_t to = first[r][next++];
      if (mark[to] == 1)
        throw SchemaError("$ref", "", "a recursion that can repeat without consuming input");
      if (mark[to] == 0) {
        mark[to] = 1;
        path.emplace_back(to, 0);
      }
    }
  }

  Grammar g;
  g.byte_sets = sets_;
  g.root = root;
  g.rules.resize(n);
  for (size_t r = 0; r < n; ++r)
    for (const Seq& s : alts_[r]) {
      g.rules[r].push_back(static_cast<int32_t>(g.elements.size()));
      for (const Sym& x : s)
        g.elements.push_back(Element{x.is_rule ? Element::Kind::kRule : Element::Kind::kBytes, x.id});
      g.elements.push_back(Element{Element::Kind::kEnd, 0});
    }
  return g;
}

}  // namespace flashserve::structured
