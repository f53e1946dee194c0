// Every refusal of the grammar compilers: unsupported keywords and limits throw SchemaError naming
// the keyword and its JSON-pointer path, and a hostile schema fails fast instead of stalling.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "structured/schema_compiler.h"
#include "structured/schema_error.h"

namespace flashserve::structured {
namespace {

struct Case {
  std::string schema, keyword, path;
};

void expect_refused(const std::string& schema, const std::string& keyword, const std::string& path,
                    const SchemaOptions& options = {}) {
  try {
    compile_json_schema(schema, options);
    ADD_FAILURE() << "accepted: " << schema;
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword(), keyword) << schema << " -> " << e.what();
    EXPECT_EQ(e.path(), path) << schema << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(keyword), std::string::npos) << e.what();
  }
}

TEST(StructuredErrors, UnsupportedKeywordsNameKeywordAndPath) {
  const std::vector<Case> cases{
      {R"({"type":"object","properties":{"a":{}},"minProperties":2})", "minProperties", ""},
      {R"({"type":"object","additionalProperties":{},"minProperties":2,"maxProperties":1})", "minProperties", ""},
      {R"({"type":"integer","minimum":1,"maximum":5,"multipleOf":7})", "multipleOf", "/multipleOf"},
      {R"({"type":"integer","multipleOf":0.3})", "multipleOf", "/multipleOf"},
      {R"({"type":"object","properties":{"a":{}},"propertyNames":{"pattern":"^b"},"required":["a"]})", "required", "/required"},
      {R"({"type":"object","properties":{"a":{}},"additionalProperties":true,"propertyNames":{"maxLength":2}})", "propertyNames", "/propertyNames"},
      {R"({"not":{"type":"integer"},"type":"number"})", "not", "/not"},
      {R"({"type":"string","minLength":3,"pattern":"^a{0,2}$"})", "pattern", "/pattern"},
      {R"({"not":{"required":["a"]}})", "not", "/not"},
      {R"({"if":{},"then":{}})", "if", "/if"},
      {R"({"type":"number","multipleOf":3})", "multipleOf", "/multipleOf"},
      {R"({"type":"array","items":{"type":"string"},"uniqueItems":true,"minItems":2})", "uniqueItems", "/uniqueItems"},
      {R"({"type":"array","items":{"enum":[1,2]},"uniqueItems":true,"minItems":3})", "minItems", "/items"},
      {R"({"type":"string","pattern":"(a)\\1"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"(?=a)b"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"a\\bc"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"a^b"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"(a*)*"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"[a-"})", "pattern", "/pattern"},
      {R"({"type":"string","pattern":"^a$","minLength":2})", "pattern", "/pattern"},
      {R"({"$ref":"https://example.com/s.json"})", "$ref", "/$ref"},
      {R"({"$ref":"#/$defs/missing"})", "$ref", "/$ref"},
      {R"({"$ref":"#/$defs/a","type":"object"})", "$ref", "/allOf/0"},
      {R"({"type":"object","patternProperties":{"^a":{},"^b":{}}})", "patternProperties", "/patternProperties"},
      {R"({"properties":{"ab":{}},"patternProperties":{"^a":{}}})", "patternProperties", "/patternProperties"},
      {R"({"patternProperties":{"^a":{}},"required":["b"]})", "required", "/required"},
      {R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"})", "$ref", ""},
      {R"({"type":"strin"})", "type", "/type"},
      {R"({"enum":[]})", "enum", "/enum"},
      {R"({"enum":[1],"minimum":2})", "enum", "/enum"},
      {R"({"anyOf":[{"type":"string"}],"oneOf":[{"type":"string"}]})", "oneOf", ""},
      {R"({"allOf":[{"properties":{"a":{"type":"string"}}},{"properties":{"a":{"type":"integer"}}}]})", "allOf", "/properties/a/allOf"},
      {R"({"type":"object","required":["x"],"additionalProperties":false})", "required", "/required"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "minimum", ""},
      {R"({"type":"array","items":[{"type":"string"}],"prefixItems":[]})", "items", "/items"},
      {R"({"type":"array","minItems":5,"maxItems":2})", "minItems", "/minItems"},
      {R"(false)", "false", ""},
      {R"({"type":)", "schema", ""},
  };
  for (const Case& c : cases) expect_refused(c.schema, c.keyword, c.path);
}

TEST(StructuredErrors, LimitsAreEnforcedQuickly) {
  SchemaOptions small;
  small.limits.max_schema_bytes = 100;
  expect_refused(std::string(R"({"description":")") + std::string(200, 'x') + "\"}", "schema", "", small);
  // Deep nesting: refused before parsing.
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += R"({"items":)";
  deep += "{}";
  for (int i = 0; i < 100000; ++i) deep += "}";
  SchemaOptions big;
  big.limits.max_schema_bytes = 1 << 24;
  expect_refused(deep, "schema", "", big);
  std::string nested = "{}";
  for (int i = 0; i < 70; ++i) nested = R"({"type":"array","items":)" + nested + "}";
  std::string path;
  for (int i = 0; i < 65; ++i) path += "/items";
  expect_refused(nested, "schema", path);
  // A huge enum.
  std::string e = R"({"enum":[)";
  for (int i = 0; i < 2000; ++i) {
    if (i > 0) e += ",";
    e += std::to_string(i);
  }
  expect_refused(e + "]}", "enum", "/enum");
  // Repetition counts over the limit, and nested counts that would blow the grammar up.
  expect_refused(R"({"type":"string","minLength":5000})", "minLength", "/minLength");
  expect_refused(R"({"type":"string","pattern":"^a{2000}$"})", "pattern", "/pattern");
  const auto t0 = std::chrono::steady_clock::now();
  // Nested counts stay small: each copy is a reference to the inner rule.
  EXPECT_NO_THROW(compile_json_schema(R"({"type":"string","pattern":"^((((a{1000}){1000}){1000}){1000})$"})"));
  expect_refused(R"({"type":"string","pattern":"^(a{2,1000}b{2,1000}){2,1000}$"})", "pattern", "/pattern",
                 [] { SchemaOptions o; o.limits.max_grammar_elements = 1000; return o; }());
  expect_refused(R"({"type":"string","pattern":")" + std::string(2000, 'a') + "\"}", "pattern", "/pattern");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 5000.0) << "pathological patterns must compile or fail fast";
}

TEST(StructuredErrors, RegexAndChoiceSources) {
  EXPECT_THROW(compile_regex_grammar("(unclosed"), SchemaError);
  EXPECT_THROW(compile_choice_grammar({}), SchemaError);
  try {
    compile_regex_grammar("a{3,1}");
    ADD_FAILURE();
  } catch (const SchemaError& e) {
    EXPECT_EQ(e.keyword(), "guided_regex");
  }
}

}  // namespace
}  // namespace flashserve::structured
