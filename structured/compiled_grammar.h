// Structured outputs: JSON Schema, json_object, regex and choice constraints compiled to grammars
// that mask a vocabulary token by token. GrammarCompiler compiles (and caches) a
// CompiledGrammar per constraint; each sequence then drives its own Matcher (matcher.h).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "structured/grammar.h"
#include "structured/lru_cache.h"
#include "structured/schema_compiler.h"
#include "structured/schema_validator.h"
#include "structured/vocab_trie.h"

namespace flashserve::structured {

// A grammar bound to a vocabulary: immutable to its users and shared by every sequence with the
// same constraint; the cache of token masks inside is shared too (thread-safe).
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const VocabTrie> trie, size_t mask_cache_capacity,
                  SchemaReport report = {}, std::shared_ptr<const SchemaValidator> validator = nullptr);

  const Grammar& grammar() const { return grammar_; }
  // A JSON Schema's unknown keywords and the keywords best effort dropped.
  const SchemaReport& report() const { return report_; }
  // The original schema's validator when keywords were dropped (the grammar alone does not
  // guarantee a valid output); nullptr when the grammar enforces the whole schema.
  const SchemaValidator* validator() const { return validator_.get(); }
  // True for the first caller only: what to log once per compiled schema.
  bool first_use() const { return !used_.exchange(true); }
  const VocabTrie& trie() const { return *trie_; }
  LruCache<std::vector<uint32_t>>& mask_cache() const { return masks_; }

 private:
  Grammar grammar_;
  std::shared_ptr<const VocabTrie> trie_;
  SchemaReport report_;
  std::shared_ptr<const SchemaValidator> validator_;
  mutable std::atomic<bool> used_{false};
  mutable LruCache<std::vector<uint32_t>> masks_;  // parser-state key -> mask
};

struct CompilerOptions {
  SchemaOptions schema;
  size_t grammar_cache_capacity = 64;   // compiled grammars kept, by canonical text
  size_t mask_cache_capacity = 256;     // masks kept per grammar (vocab/8 bytes each)
};

// Thread-safe: compiles off the engine thread, and returns a cached grammar for a constraint it
// has seen. Errors in the constraint throw SchemaError.
class GrammarCompiler {
 public:
  GrammarCompiler(std::shared_ptr<const VocabTrie> trie, CompilerOptions options = {});

  // strict: refuse keywords the grammar cannot express (SchemaOptions::strict); false: drop
  // them, and the grammar carries the original schema's validator.
  std::shared_ptr<const CompiledGrammar> json_schema(std::string_view schema_text, bool strict = true);
  // prefix + a value of the schema + suffix: a tool call's body between its literal markers.
  std::shared_ptr<const CompiledGrammar> json_schema_between(std::string_view prefix,
                                                             std::string_view schema_text,
                                                             std::string_view suffix);
  // prefixes[i] + a value of anyOf[i] + suffix, for {"anyOf": [...]} with one schema per prefix.
  std::shared_ptr<const CompiledGrammar> json_schema_branches(const std::vector<std::string>& prefixes,
                                                              std::string_view schema_text,
                                                              std::string_view suffix);
  std::shared_ptr<const CompiledGrammar> json_object();
  std::shared_ptr<const CompiledGrammar> regex(std::string_view pattern);
  std::shared_ptr<const CompiledGrammar> choice(const std::vector<std::string>& choices);

  const VocabTrie& trie() const { return *trie_; }

 private:
  template <class F>
  std::shared_ptr<const CompiledGrammar> cached(const std::string& key, F compile);
  std::shared_ptr<const CompiledGrammar> bind(Grammar grammar, SchemaReport report, std::string_view schema_text) const;

  std::shared_ptr<const VocabTrie> trie_;
  CompilerOptions options_;
  LruCache<CompiledGrammar> cache_;
};

}  // namespace flashserve::structured
