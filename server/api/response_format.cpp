// response_format and guided_* (see response_format.h): shape checks, one source at most, then
// the GrammarCompiler (cached by canonical text, so a repeated schema compiles once).
#include "server/api/response_format.h"

#include <cstdio>

#include "output_parsers/reasoning_parser.h"
#include "server/api/request_fields.h"
#include "structured/compiled_grammar.h"
#include "structured/schema_error.h"

namespace flashserve::request {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr const char* kGuided[] = {"guided_json", "guided_regex", "guided_choice", "guided_grammar"};

// A JSON Schema given as an object, or (guided_json) as its JSON text.
std::string schema_text(const ordered_json& s, const std::string& param, bool text_allowed) {
  if (s.is_object()) return s.dump();
  if (text_allowed && s.is_string()) return s.get<std::string>();
  throw bad_request("'" + param + "' must be a JSON Schema object" +
                        (text_allowed ? std::string(" or its JSON text") : ""), param);
}

// Once per compiled schema: the unknown keywords it ignored and the keywords best effort left to
// validation (a log line; the response itself reports mismatches).
std::shared_ptr<const structured::CompiledGrammar> logged(
    const std::string& param, std::shared_ptr<const structured::CompiledGrammar> g) {
  const structured::SchemaReport& r = g->report();
  if ((r.unknown.empty() && r.dropped.empty()) || !g->first_use()) return g;
  std::string line = "flashserve: " + param + ":";
  if (!r.unknown.empty()) {
    line += " unknown keywords ignored:";
    for (const auto& [keyword, path] : r.unknown) line += " " + keyword + " (" + path + ")";
    if (!r.dropped.empty()) line += ";";
  }
  if (!r.dropped.empty()) {
    line += " not enforced by the grammar, validated after generation:";
    for (const auto& d : r.dropped) line += " " + d.keyword + " (" + d.path + ")";
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  return g;
}

// response_format: nullopt for text, else the grammar.
std::shared_ptr<const structured::CompiledGrammar> response_format(const json& f,
                                                                   const ordered_json& of,
                                                                   const ServedModel& model) {
  const std::string p = "response_format";
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
    throw bad_request("'response_format' must be an object with a string 'type'", p);
  }
  const std::string type = f["type"].get<std::string>();
  if (type == "text" || type == "json_object") {
    only_keys(f, p, {"type"});
    if (type == "text") return nullptr;
    return grammar_compiler(model, p).json_object();
  }
  if (type != "json_schema") {
    throw bad_request("'response_format.type' must be 'text', 'json_object' or 'json_schema', "
                      "got '" + type + "'", p + ".type");
  }
  only_keys(f, p, {"type", "json_schema"});
  const std::string js = p + ".json_schema";
  if (!has(f, "json_schema") || !f["json_schema"].is_object()) {
    throw bad_request("'" + js + "' is required (an object with 'name' and 'schema')", js);
  }
  const json& s = f["json_schema"];
  only_keys(s, js, {"name", "schema", "strict", "description"});
  if (has(s, "name") && !s["name"].is_string()) throw bad_request("'" + js + ".name' must be a string", js + ".name");
  if (has(s, "description") && !s["description"].is_string()) {
    throw bad_request("'" + js + ".description' must be a string", js + ".description");
  }
  const bool strict = has(s, "strict") && get_bool(s["strict"], js + ".strict");
  if (!has(s, "schema")) throw bad_request("'" + js + ".schema' is required", js + ".schema");
  const std::string text = schema_text(of["json_schema"]["schema"], js + ".schema", false);
  try {
    return logged(js + ".schema", grammar_compiler(model, js + ".schema").json_schema(text, strict));
  } catch (const structured::SchemaError& e) {
    throw schema_error(js + ".schema", e);
  }
}

std::shared_ptr<const structured::CompiledGrammar> guided(const std::string& key, const json& v,
                                                          const ordered_json& ov,
                                                          const ServedModel& model) {
  structured::GrammarCompiler& compiler = grammar_compiler(model, key);
  try {
    if (key == "guided_json") return logged(key, compiler.json_schema(schema_text(ov, key, true), false));
    if (key == "guided_regex") {
      if (!v.is_string()) throw bad_request("'guided_regex' must be a string", key);
      return compiler.regex(v.get<std::string>());
    }
    if (key == "guided_choice") {
      if (!v.is_array() || v.empty()) {
        throw bad_request("'guided_choice' must be a non-empty list of strings", key);
      }
      std::vector<std::string> choices;
      for (const auto& c : v) {
        if (!c.is_string()) throw bad_request("'guided_choice' must be a list of strings", key);
        choices.push_back(c.get<std::string>());
      }
      return compiler.choice(choices);
    }
  } catch (const structured::SchemaError& e) {
    throw schema_error(key, e);
  }
  throw bad_request("'guided_grammar' is not supported (EBNF grammars are not implemented); use "
                    "guided_json, guided_regex or guided_choice", key, "unsupported_parameter");
}

}  // namespace

bool has_output_format(const json& j) {
  if (has(j, "response_format")) return true;
  for (const char* k : kGuided) {
    if (has(j, k)) return true;
  }
  return false;
}

structured::GrammarCompiler& grammar_compiler(const ServedModel& model, const std::string& param) {
  if (!model.grammar_compiler) {
    throw bad_request("structured output is not available for this model", param,
                      "unsupported_parameter");
  }
  return *model.grammar_compiler;
}

std::optional<json> schema_mismatch(const CompletionRequest& req, std::string_view generated) {
  if (!req.constraint || !req.constraint->triggers.empty() || !req.constraint->grammar) return std::nullopt;
  const structured::SchemaValidator* validator = req.constraint->grammar->validator();
  if (validator == nullptr) return std::nullopt;
  std::string content(generated);
  if (req.reasoning) content = output_parsers::split_reasoning(content, req.starts_in_reasoning).content;
  const auto v = validator->validate(content);
  if (!v) return std::nullopt;
  json not_enforced = json::array();
  for (const auto& d : req.constraint->grammar->report().dropped) not_enforced.push_back(d.path);
  return json{{"keyword", v->keyword}, {"schema_path", v->schema_path},
              {"instance_path", v->instance_path}, {"message", v->message},
              {"not_enforced", std::move(not_enforced)}};
}

ApiError schema_error(const std::string& param, const structured::SchemaError& e) {
  // SchemaError's text is "schema <path>: '<keyword>': <problem>"; keep only the problem.
  std::string problem = e.what();
  const size_t cut = problem.find("'" + e.keyword() + "': ");
  if (cut != std::string::npos) problem = problem.substr(cut + e.keyword().size() + 4);
  return bad_request(param + ": '" + e.keyword() + "' at " +
                         (e.path().empty() ? std::string("(root)") : e.path()) + ": " + problem,
                     param, "invalid_schema");
}

std::optional<OutputConstraint> read_output_format(const json& j, std::string_view body,
                                                   const ServedModel& model) {
  if (!has_output_format(j)) return std::nullopt;
  const ordered_json oj = ordered_json::parse(body);  // valid: j was parsed from it
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  std::string source;
  auto take = [&](const std::string& key, std::shared_ptr<const structured::CompiledGrammar> g) {
    if (!g) return;
    if (grammar) {
      throw bad_request("'" + key + "' and '" + source + "' both constrain the output; send one",
                        key);
    }
    grammar = std::move(g);
    source = key;
  };
  if (has(j, "response_format")) {
    take("response_format", response_format(j["response_format"], oj["response_format"], model));
  }
  for (const char* k : kGuided) {
    if (has(j, k)) take(k, guided(k, j[k], oj[k], model));
  }
  if (!grammar) return std::nullopt;
  if (has(j, "ignore_eos") && j["ignore_eos"] == true) {
    throw bad_request("'ignore_eos' cannot be combined with '" + source + "' (the output ends "
                      "where the constraint is complete)", "ignore_eos");
  }
  OutputConstraint c;
  c.grammar = std::move(grammar);
  c.end_tokens = model.eos_ids;
  return c;
}

}  // namespace flashserve::request
