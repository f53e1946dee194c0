// CompiledGrammar and GrammarCompiler: compile once per distinct constraint, keyed by its kind
// and canonical text.
#include "structured/compiled_grammar.h"

namespace flashserve::structured {

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const VocabTrie> trie,
                                 size_t mask_cache_capacity)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), masks_(mask_cache_capacity) {}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const VocabTrie> trie, CompilerOptions options)
    : trie_(std::move(trie)), options_(options), cache_(options.grammar_cache_capacity) {}

template <class F>
std::shared_ptr<const CompiledGrammar> GrammarCompiler::cached(const std::string& key, F compile) {
  if (auto hit = cache_.get(key)) return hit;
  auto compiled = std::make_shared<const CompiledGrammar>(compile(), trie_, options_.mask_cache_capacity);
  cache_.put(key, compiled);
  return compiled;
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_schema(std::string_view schema_text) {
  const std::string key = "schema:" + canonical_schema_text(schema_text, options_.schema);
  return cached(key, [&] { return compile_json_schema(schema_text, options_.schema); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_schema_between(
    std::string_view prefix, std::string_view schema_text, std::string_view suffix) {
  const std::string key = "between:" + std::to_string(prefix.size()) + ":" + std::string(prefix) +
                          std::to_string(suffix.size()) + ":" + std::string(suffix) +
                          canonical_schema_text(schema_text, options_.schema);
  return cached(key, [&] {
    return compile_json_schema_between(prefix, schema_text, suffix, options_.schema);
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_object() {
  return cached("json_object", [&] { return compile_json_object(options_.schema); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::regex(std::string_view pattern) {
  return cached("regex:" + std::string(pattern), [&] { return compile_regex_grammar(pattern, options_.schema); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::choice(const std::vector<std::string>& choices) {
  std::string key = "choice:";
  for (const std::string& c : choices) key += std::to_string(c.size()) + ":" + c;
  return cached(key, [&] { return compile_choice_grammar(choices, options_.schema); });
}

}  // namespace flashserve::structured
