// CompiledGrammar and GrammarCompiler: compile once per distinct constraint, keyed by its kind
// and canonical text.
#include "structured/compiled_grammar.h"

namespace flashserve::structured {

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const VocabTrie> trie,
                                 size_t mask_cache_capacity, SchemaReport report,
                                 std::shared_ptr<const SchemaValidator> validator)
    : grammar_(std::move(grammar)),
      trie_(std::move(trie)),
      report_(std::move(report)),
      validator_(std::move(validator)),
      masks_(mask_cache_capacity) {}

GrammarCompiler::GrammarCompiler(std::shared_ptr<const VocabTrie> trie, CompilerOptions options)
    : trie_(std::move(trie)), options_(options), cache_(options.grammar_cache_capacity) {}

template <class F>
std::shared_ptr<const CompiledGrammar> GrammarCompiler::cached(const std::string& key, F compile) {
  if (auto hit = cache_.get(key)) return hit;
  std::shared_ptr<const CompiledGrammar> compiled = compile();
  cache_.put(key, compiled);
  return compiled;
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::bind(Grammar grammar, SchemaReport report,
                                                             std::string_view schema_text) const {
  std::shared_ptr<const SchemaValidator> validator;
  if (!report.dropped.empty()) validator = std::make_shared<const SchemaValidator>(schema_text);
  return std::make_shared<const CompiledGrammar>(std::move(grammar), trie_, options_.mask_cache_capacity,
                                                 std::move(report), std::move(validator));
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_schema(std::string_view schema_text, bool strict) {
  const std::string key = (strict ? "schema:" : "schema-best-effort:") + canonical_schema_text(schema_text, options_.schema);
  return cached(key, [&] {
    SchemaOptions o = options_.schema;
    o.strict = strict;
    SchemaReport report;
    Grammar g = compile_json_schema(schema_text, o, &report);
    return bind(std::move(g), std::move(report), schema_text);
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_schema_between(
    std::string_view prefix, std::string_view schema_text, std::string_view suffix) {
  const std::string key = "between:" + std::to_string(prefix.size()) + ":" + std::string(prefix) +
                          std::to_string(suffix.size()) + ":" + std::string(suffix) +
                          canonical_schema_text(schema_text, options_.schema);
  return cached(key, [&] {
    SchemaReport report;
    Grammar g = compile_json_schema_between(prefix, schema_text, suffix, options_.schema, &report);
    return bind(std::move(g), std::move(report), schema_text);
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_schema_branches(
    const std::vector<std::string>& prefixes, std::string_view schema_text, std::string_view suffix) {
  std::string key = "branches:";
  for (const std::string& p : prefixes) key += std::to_string(p.size()) + ":" + p;
  key += std::to_string(suffix.size()) + ":" + std::string(suffix) +
         canonical_schema_text(schema_text, options_.schema);
  return cached(key, [&] {
    SchemaReport report;
    Grammar g = compile_json_schema_branches(prefixes, schema_text, suffix, options_.schema, &report);
    return bind(std::move(g), std::move(report), schema_text);
  });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::json_object() {
  return cached("json_object", [&] { return bind(compile_json_object(options_.schema), {}, ""); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::regex(std::string_view pattern) {
  return cached("regex:" + std::string(pattern), [&] { return bind(compile_regex_grammar(pattern, options_.schema), {}, ""); });
}

std::shared_ptr<const CompiledGrammar> GrammarCompiler::choice(const std::vector<std::string>& choices) {
  std::string key = "choice:";
  for (const std::string& c : choices) key += std::to_string(c.size()) + ":" + c;
  return cached(key, [&] { return bind(compile_choice_grammar(choices, options_.schema), {}, ""); });
}

}  // namespace flashserve::structured
