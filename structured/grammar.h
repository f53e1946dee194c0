// The grammar every constraint compiles to: rules whose alternatives are sequences of byte sets
// and rule references, stored flat so a parser position is one int. GrammarBuilder assembles it
// (with a size limit, so a hostile schema cannot make it huge) and refuses left recursion, which
// the pushdown parser (stack_automaton.h) could not run.
#pragma once

#include <bitset>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace flashserve::structured {

using ByteSet = std::bitset<256>;

// One element of an alternative: a byte from a set, a call of a rule, or the alternative's end.
struct Element {
  enum class Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = Kind::kEnd;
  int32_t id = 0;  // kBytes: index into Grammar::byte_sets; kRule: rule index
};

struct Grammar {
  std::vector<Element> elements;                // every alternative, each closed by kEnd
  std::vector<std::vector<int32_t>> rules;      // rule -> the positions its alternatives start at
  std::vector<ByteSet> byte_sets;               // deduplicated
  int32_t root = 0;
};

// A symbol inside a sequence being built: a byte set or a rule.
struct Sym {
  bool is_rule = false;
  int32_t id = 0;
};
using Seq = std::vector<Sym>;

class GrammarBuilder {
 public:
  // max_elements bounds the grammar's size; exceeding it throws SchemaError(keyword, path).
  explicit GrammarBuilder(size_t max_elements) : max_elements_(max_elements) {}

  // Where the next size-limit error points (the schema keyword being compiled).
  void set_context(std::string keyword, std::string path);

  int32_t new_rule();                          // a rule with no alternatives yet
  void add_alt(int32_t rule, const Seq& seq);  // an empty seq is the empty alternative
  int32_t rule_of(const std::vector<Seq>& alts);  // a new rule with these alternatives

  Sym bytes(const ByteSet& set);
  Sym byte(uint8_t b);
  Sym byte_range(uint8_t lo, uint8_t hi);
  static Sym rule(int32_t id) { return Sym{true, id}; }
  Seq literal(std::string_view text);          // one byte symbol per byte

  // Combinators; each returns a rule symbol.
  Sym optional(const Seq& seq);                // seq | ε
  Sym star(const Seq& seq);                    // S = seq S | ε (seq must not match ε)
  Sym repeat(const Seq& seq, int min, int max);  // max < 0: unbounded
  Sym empty();                                 // the rule matching only ε

  // Checks for left recursion and returns the grammar rooted at `root`.
  Grammar build(int32_t root);

 private:
  void charge(size_t n);
  size_t max_elements_;
  size_t size_ = 0;
  std::string keyword_ = "schema", path_;
  std::vector<std::vector<Seq>> alts_;
  std::vector<ByteSet> sets_;
  std::map<std::string, int32_t> set_index_;
  int32_t empty_rule_ = -1;
};

}  // namespace flashserve::structured
