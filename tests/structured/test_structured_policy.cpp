// The keyword policy: unknown keywords are ignored and reported once, annotations silently;
// keywords the grammar cannot express are refused under strict and dropped (and reported) under
// best effort; SchemaValidator reads the original schema as JSON Schema does.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "structured/schema_compiler.h"
#include "structured/schema_error.h"
#include "structured/schema_validator.h"
#include "structured_test_util.h"

namespace flashserve::structured {
namespace {

SchemaOptions best_effort() {
  SchemaOptions o;
  o.strict = false;
  return o;
}

TEST(StructuredPolicy, UnknownKeywordsAreIgnoredAndListedOnce) {
  const std::string schema = R"({"type":"object","markdownDescription":"m","properties":{
      "a":{"type":"string","_format":"x","ui:title":"A","descrption":"typo"},
      "b":{"type":"integer","propertyOrder":2,"_format":"y"}},"required":["a"],
      "additonalProperties":false,"title":"t","x-vendor":1,"$comment":"c"})";
  for (bool strict : {true, false}) {
    SchemaOptions o;
    o.strict = strict;
    SchemaReport r;
    Grammar g = compile_json_schema(schema, o, &r);
    EXPECT_TRUE(testing::matches(g, R"({"a":"q","b":3})"));
    EXPECT_FALSE(testing::matches(g, R"({"b":3})"));
    std::vector<std::pair<std::string, std::string>> want{
        {"markdownDescription", "/markdownDescription"}, {"additonalProperties", "/additonalProperties"},
        {"_format", "/properties/a/_format"}, {"ui:title", "/properties/a/ui:title"},
        {"descrption", "/properties/a/descrption"}, {"propertyOrder", "/properties/b/propertyOrder"}};
    std::sort(want.begin(), want.end());
    std::sort(r.unknown.begin(), r.unknown.end());
    EXPECT_EQ(r.unknown, want);  // _format once; title, x-vendor, $comment silently
    EXPECT_TRUE(r.dropped.empty());
  }
}

TEST(StructuredPolicy, StrictRefusesWhatBestEffortDrops) {
  struct Case {
    std::string schema, keyword, path;
    std::string allowed_only_by_dropping;  // generated although the original schema refuses it
  };
  const std::vector<Case> cases{
      {R"({"type":"array","items":{"type":"integer"},"contains":{"const":3}})", "contains", "/contains", "[1]"},
      {R"j({"type":"object","properties":{"a":{"type":"string","pattern":"^(?!x)"}},"required":["a"]})j", "pattern",
       "/properties/a/pattern", R"({"a":"x"})"},
      {R"({"type":"array","prefixItems":[{"type":"integer"}],"unevaluatedItems":false})", "unevaluatedItems",
       "/unevaluatedItems", "[1,2]"},
  };
  for (const Case& c : cases) {
    try {
      compile_json_schema(c.schema);
      ADD_FAILURE() << "strict accepted " << c.schema;
    } catch (const SchemaError& e) {
      EXPECT_EQ(e.keyword(), c.keyword) << e.what();
      EXPECT_EQ(e.path(), c.path) << e.what();
    }
    SchemaReport r;
    Grammar g = compile_json_schema(c.schema, best_effort(), &r);
    ASSERT_EQ(r.dropped.size(), 1u) << c.schema;
    EXPECT_EQ(r.dropped[0].keyword, c.keyword);
    EXPECT_EQ(r.dropped[0].path, c.path);
    EXPECT_TRUE(testing::matches(g, c.allowed_only_by_dropping)) << c.schema;
    // The validator of the original schema reports what the grammar let through.
    auto v = SchemaValidator(c.schema).validate(c.allowed_only_by_dropping);
    ASSERT_TRUE(v) << c.schema;
  }
  // Invalid JSON and the limits are refused under best effort too.
  EXPECT_THROW(compile_json_schema("{", best_effort()), SchemaError);
  EXPECT_THROW(compile_json_schema("false", best_effort()), SchemaError);
}

TEST(StructuredPolicy, ValidatorReadsTheSpec) {
  struct Case {
    std::string schema, value;
    std::string keyword;  // "" when valid
    std::string instance_path = "";
  };
  const std::vector<Case> cases{
      {R"({"type":"integer"})", "3", ""},
      {R"({"type":"integer"})", "3.5", "type"},
      {R"({"type":"integer"})", "3.0", ""},
      {R"({"type":["string","null"]})", "null", ""},
      {R"({"type":"string","nullable":true})", "null", ""},
      {R"({"enum":[1,"a"]})", "1.0", ""},
      {R"({"const":{"a":1}})", R"({"a":2})", "const"},
      {R"({"minimum":1,"exclusiveMaximum":3})", "3", "exclusiveMaximum"},
      {R"({"minimum":1,"exclusiveMinimum":true})", "1", "minimum"},
      {R"({"multipleOf":3})", "9", ""},
      {R"({"multipleOf":3})", "10", "multipleOf"},
      {R"({"multipleOf":0.1})", "0.3", ""},
      {R"({"minLength":2,"maxLength":3})", R"("é€")", ""},
      {R"({"maxLength":1})", R"("ab")", "maxLength"},
      {R"({"pattern":"^a+$"})", R"("aab")", "pattern"},
      {R"({"format":"date"})", R"("2023-02-29")", "format"},
      {R"({"format":"date-time"})", R"("2024-02-29T10:00:00Z")", ""},
      {R"({"format":"ipv4"})", R"("1.2.3.04")", "format"},
      {R"({"format":"unknown-format"})", R"("x")", ""},
      {R"({"properties":{"a":{"type":"integer"}},"required":["a"]})", R"({"a":"x"})", "type", "/a"},
      {R"({"properties":{"a":{}},"additionalProperties":false})", R"({"a":1,"b":2})", "false", "/b"},
      {R"({"patternProperties":{"^x-":{"type":"integer"}},"additionalProperties":false})", R"({"x-a":1})", ""},
      {R"({"patternProperties":{"^x-":{"type":"integer"}}})", R"({"x-a":"s"})", "type", "/x-a"},
      {R"({"minProperties":2})", R"({"a":1})", "minProperties"},
      {R"({"maxProperties":1})", R"({"a":1,"b":2})", "maxProperties"},
      {R"({"propertyNames":{"pattern":"^[a-z]+$"}})", R"({"aB":1})", "pattern", "/aB"},
      {R"({"dependentRequired":{"a":["b"]}})", R"({"a":1})", "dependentRequired"},
      {R"({"dependencies":{"a":["b"]}})", R"({"a":1,"b":1})", ""},
      {R"({"dependentSchemas":{"a":{"required":["c"]}}})", R"({"a":1})", "required"},
      {R"({"not":{"type":"string"}})", R"("s")", "not"},
      {R"({"not":{"enum":[1,2]}})", "3", ""},
      {R"({"if":{"properties":{"k":{"const":1}}},"then":{"required":["a"]},"else":{"required":["b"]}})", R"({"k":1,"b":1})", "required"},
      {R"({"if":{"properties":{"k":{"const":1}}},"then":{"required":["a"]},"else":{"required":["b"]}})", R"({"k":2,"b":1})", ""},
      {R"({"anyOf":[{"type":"string"},{"type":"integer"}]})", "true", "anyOf"},
      {R"({"oneOf":[{"type":"integer"},{"minimum":0}]})", "3", "oneOf"},
      {R"({"allOf":[{"minimum":0},{"maximum":2}]})", "3", "maximum"},
      {R"({"type":"array","uniqueItems":true})", "[1,2,1.0]", "uniqueItems"},
      {R"({"prefixItems":[{"type":"integer"}],"items":false})", "[1,2]", "false", "/1"},
      {R"({"items":[{"type":"integer"}],"additionalItems":{"type":"string"}})", R"([1,"a",2])", "type", "/2"},
      {R"({"contains":{"const":3},"maxContains":1})", "[3,3]", "maxContains"},
      {R"({"properties":{"a":{}},"allOf":[{"properties":{"b":{}}}],"unevaluatedProperties":false})", R"({"a":1,"b":2})", ""},
      {R"({"properties":{"a":{}},"allOf":[{"properties":{"b":{}}}],"unevaluatedProperties":false})", R"({"a":1,"c":2})", "false", "/c"},
      {R"({"$defs":{"n":{"type":"integer"}},"items":{"$ref":"#/$defs/n"}})", R"([1,"x"])", "type", "/1"},
      {R"({"$ref":"https://example.com/remote.json"})", "1", ""},
      {R"({"type":"integer"})", "{not json", "json"},
  };
  for (const Case& c : cases) {
    auto v = SchemaValidator(c.schema).validate(c.value);
    if (c.keyword.empty()) {
      EXPECT_FALSE(v) << c.schema << " " << c.value << ": " << v->keyword << " " << v->message;
      continue;
    }
    ASSERT_TRUE(v) << c.schema << " " << c.value;
    EXPECT_EQ(v->keyword, c.keyword) << c.schema << " " << c.value;
    EXPECT_EQ(v->instance_path, c.instance_path) << c.schema << " " << c.value;
  }
}

}  // namespace
}  // namespace flashserve::structured
