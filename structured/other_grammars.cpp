// The grammar sources that are not a JSON Schema: any JSON object (json_object mode), a regex over
// the raw output (guided_regex) and one of a list of literal strings (guided_choice).
#include "structured/regex_compiler.h"
#include "structured/schema_compiler.h"
#include "structured/schema_error.h"

namespace flashserve::structured {

Grammar compile_json_object(const SchemaOptions& options) {
  GrammarBuilder b(options.limits.max_grammar_elements);
  JsonGrammar json(b, options.whitespace);
  return b.build(b.rule_of({{json.any_object()}}));
}

Grammar compile_regex_grammar(std::string_view pattern, const SchemaOptions& options) {
  GrammarBuilder b(options.limits.max_grammar_elements);
  RegexOptions ro{.context = CharContext::kRaw, .search = false,
                  .max_pattern_bytes = options.limits.max_pattern_bytes,
                  .max_repeat = options.limits.max_repeat, .keyword = "guided_regex", .path = ""};
  Sym body = compile_regex(b, pattern, ro);
  return b.build(b.rule_of({{body}}));
}

Grammar compile_choice_grammar(const std::vector<std::string>& choices, const SchemaOptions& options) {
  if (choices.empty()) throw SchemaError("guided_choice", "", "the list of choices is empty");
  if (choices.size() > options.limits.max_enum)
    throw SchemaError("guided_choice", "", str_cat("more than ", options.limits.max_enum, " choices"));
  GrammarBuilder b(options.limits.max_grammar_elements);
  b.set_context("guided_choice", "");
  std::vector<Seq> alts;
  for (const std::string& c : choices) alts.push_back(b.literal(c));
  return b.build(b.rule_of(alts));
}

}  // namespace flashserve::structured
