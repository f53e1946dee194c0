// Structured outputs and tool calling at the API edge (label unit): response_format and guided_*
// on both endpoints, tools / tool_choice / parallel_tool_calls, tool and assistant tool_calls
// messages, every 400 and the parameter it names; the tools prompt for a template without tool
// support and the tools a template that reads them sees; forced-call grammars (checked by
// walking them byte by byte); tool-call output whole and streamed. Fake byte-level tokenizer.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "server/endpoints/chat_request.h"
#include "server/endpoints/completions_request.h"
#include "server/tool_calls/tool_call_constraint.h"
#include "server/tool_calls/tool_call_output.h"
#include "server/api/response_format.h"
#include "structured/compiled_grammar.h"
#include "structured/matcher.h"
#include "structured/token_vocabulary.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;
using output_parsers::ToolCallFormat;

// Key order matters (a schema's properties are written in its order, and templates print tools as
// sent), so bodies that test it are sent as text: nlohmann::json would sort the keys.
const char* kWeatherText = R"({"type":"function","function":{"name":"get_weather",
  "description":"Weather of a city","parameters":{"type":"object","properties":{
  "city":{"type":"string"},"days":{"type":"integer","minimum":1,"maximum":7}},
  "required":["city","days"]}}})";
const json kWeather = json::parse(kWeatherText);
const json kTime = json::parse(R"({"type":"function","function":{"name":"get_time"}})");

class StructuredRequest : public ::testing::Test {
 protected:
  void SetUp() override { use_template("chatml"); }
  void use_template(const std::string& name_or_file) {
    model.chat_template =
        std::make_shared<ChatTemplate>(ChatTemplate::from_flag(name_or_file, "<s>", "</s>"));
    model.grammar_compiler = std::make_shared<structured::GrammarCompiler>(
        std::make_shared<const structured::VocabTrie>(
            structured::vocabulary_from_tokenizer(tok, model.vocab_size, {2})));
    model.eos_ids = {2};
    model.tool_calls = tool_call_syntax("auto", model.chat_template->source(),
                                        model.chat_template->uses_tools(), tok);
  }
  testing::FakeTokenizer tok;
  ServedModel model{"stories", 4096, 262, 1700000000};

  std::variant<CompletionRequest, ApiError> parse(json body, bool chat) {
    if (chat && !body.contains("messages")) {
      body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
    }
    if (!chat && !body.contains("prompt")) body["prompt"] = "hi";
    return chat ? parse_chat_request(body.dump(), model, tok)
                : parse_completion_request(body.dump(), model, tok);
  }
  CompletionRequest ok_text(const std::string& body) {
    auto r = parse_chat_request(body, model, tok);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << body << " -> " << e->message;
      return {};
    }
    return std::get<CompletionRequest>(r);
  }
  CompletionRequest ok(const json& body, bool chat = true) {
    auto r = parse(body, chat);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << body.dump() << " -> " << e->message;
      return {};
    }
    return std::get<CompletionRequest>(r);
  }
  ApiError err(const json& body, bool chat = true) {
    auto r = parse(body, chat);
    if (auto* e = std::get_if<ApiError>(&r)) return *e;
    ADD_FAILURE() << body.dump() << " was accepted";
    return {};
  }
  std::string prompt(const CompletionRequest& r) { return tok.decode(r.prompts.at(0)); }
};

// Whether the constraint's grammar takes exactly `text` (byte tokens 3..258) and then EOS.
bool grammar_takes(const OutputConstraint& c, const std::string& text) {
  structured::Matcher m(c.grammar);
  for (unsigned char b : text) {
    if (!m.accept_token(3 + b)) return false;
  }
  return m.is_accepting();
}

TEST_F(StructuredRequest, ResponseFormatOnBothEndpoints) {
  for (bool chat : {true, false}) {
    EXPECT_FALSE(ok({{"response_format", {{"type", "text"}}}}, chat).constraint);
    CompletionRequest r = ok({{"response_format", {{"type", "json_object"}}}}, chat);
    ASSERT_TRUE(r.constraint);
    EXPECT_TRUE(r.constraint->triggers.empty());
    EXPECT_EQ(r.constraint->end_tokens, std::vector<int32_t>{2});
    EXPECT_TRUE(grammar_takes(*r.constraint, R"({"a":[1,true]})"));
    EXPECT_FALSE(grammar_takes(*r.constraint, "[1]"));
    const std::string schema_text = R"({"type":"object","properties":{"z":{"type":"integer"},
                                 "a":{"type":"boolean"}},"required":["z","a"]})";
    const json schema = json::parse(schema_text);
    const std::string head = chat ? R"({"messages":[{"role":"user","content":"hi"}],)"
                                  : R"({"prompt":"hi",)";
    const std::string body = head + R"("response_format":{"type":"json_schema","json_schema":)"
                             R"({"name":"x","strict":true,"description":"d","schema":)" +
                             schema_text + "}}}";
    auto parsed = chat ? parse_chat_request(body, model, tok) : parse_completion_request(body, model, tok);
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(parsed)) << body;
    r = std::get<CompletionRequest>(parsed);
    ASSERT_TRUE(r.constraint);
    // The schema's own property order (z before a), not the sorted one.
    EXPECT_TRUE(grammar_takes(*r.constraint, R"({"z":1,"a":true})"));
    EXPECT_FALSE(grammar_takes(*r.constraint, R"({"a":true,"z":1})"));
    EXPECT_TRUE(grammar_takes(*ok({{"guided_json", schema.dump()}}, chat).constraint,
                              R"({"a":false,"z":-3})"));  // dump() sorted its keys
    EXPECT_TRUE(grammar_takes(*ok({{"guided_regex", "[ab]+c"}}, chat).constraint, "abac"));
    CompletionRequest choice = ok({{"guided_choice", {"yes", "no"}}}, chat);
    EXPECT_TRUE(grammar_takes(*choice.constraint, "no"));
    EXPECT_FALSE(grammar_takes(*choice.constraint, "maybe"));
  }
}

// strict absent: a keyword the grammar cannot enforce is dropped, not refused, and a finished
// output is checked against the original schema (finish_reason schema_mismatch + the field).
TEST_F(StructuredRequest, BestEffortSchemasAreValidatedAfterGeneration) {
  const json schema = json::parse(R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"},
                                      "contains":{"const":3}},"b":{"type":"integer","unit":"m"}},"required":["a"]})");
  for (bool chat : {true, false}) {
    CompletionRequest r = ok({{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"schema", schema}}}}}}, chat);
    ASSERT_TRUE(r.constraint);
    const structured::SchemaReport& report = r.constraint->grammar->report();
    ASSERT_EQ(report.dropped.size(), 1u);
    EXPECT_EQ(report.dropped[0].path, "/properties/a/contains");
    ASSERT_EQ(report.unknown.size(), 1u);
    EXPECT_EQ(report.unknown[0].first, "unit");
    // The grammar lets an array without 3 through; the validator catches it.
    EXPECT_TRUE(grammar_takes(*r.constraint, R"({"a":[1]})"));
    EXPECT_FALSE(request::schema_mismatch(r, R"({"a":[1,3]})"));
    auto v = request::schema_mismatch(r, R"({"a":[1]})");
    ASSERT_TRUE(v);
    EXPECT_EQ((*v)["keyword"], "contains");
    EXPECT_EQ((*v)["schema_path"], "/properties/a/contains");
    EXPECT_EQ((*v)["instance_path"], "/a");
    EXPECT_EQ((*v)["not_enforced"], json::array({"/properties/a/contains"}));
    // guided_json is best effort too; strict refuses.
    EXPECT_TRUE(ok({{"guided_json", schema.dump()}}, chat).constraint->grammar->validator());
    ApiError e = err({{"response_format", {{"type", "json_schema"},
                      {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", schema}}}}}}, chat);
    EXPECT_EQ(e.message.rfind("response_format.json_schema.schema: 'contains' at /properties/a/contains: ", 0), 0u) << e.message;
  }
  // A fully enforced schema has no validator: nothing to report.
  CompletionRequest exact = ok({{"response_format", {{"type", "json_schema"}, {"json_schema",
                               {{"name", "x"}, {"schema", {{"type", "integer"}, {"markdownDescription", "n"}}}}}}}}, true);
  EXPECT_FALSE(exact.constraint->grammar->validator());
  EXPECT_FALSE(request::schema_mismatch(exact, "7"));
}

TEST_F(StructuredRequest, BadOutputFormatsAre400sNamingTheParameter) {
  const json js = {{"type", "json_schema"}};
  auto with_schema = [&](const json& schema) {
    return json{{"response_format", {{"type", "json_schema"},
                                     {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", schema}}}}}};
  };
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"response_format", "json"}}, "response_format"},
      {{{"response_format", {{"type", "yaml"}}}}, "response_format.type"},
      {{{"response_format", {{"type", "json_object"}, {"schema", {}}}}}, "response_format.schema"},
      {{{"response_format", js}}, "response_format.json_schema"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}},
       "response_format.json_schema.schema"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {}}, {"x", 1}}}}}},
       "response_format.json_schema.x"},
      {{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {}}, {"strict", 1}}}}}},
       "response_format.json_schema.strict"},
      {with_schema(json::parse(R"({"properties":{"a":{"not":{"required":["b"]}}}})")),
       "response_format.json_schema.schema"},
      {with_schema(7), "response_format.json_schema.schema"},
      {{{"guided_json", "{not json"}}, "guided_json"},
      {{{"guided_json", 5}}, "guided_json"},
      {{{"guided_regex", 5}}, "guided_regex"},
      {{{"guided_regex", "a(?=b)"}}, "guided_regex"},
      {{{"guided_choice", json::array()}}, "guided_choice"},
      {{{"guided_choice", {1, 2}}}, "guided_choice"},
      {{{"guided_grammar", "root ::= \"a\""}}, "guided_grammar"},
      {{{"guided_regex", "a"}, {"guided_choice", {"a"}}}, "guided_choice"},
      {{{"guided_regex", "a"}, {"ignore_eos", true}}, "ignore_eos"},
  };
  for (bool chat : {true, false}) {
    for (const auto& [body, param] : cases) {
      ApiError e = err(body, chat);
      EXPECT_EQ(e.status, 400) << body.dump();
      EXPECT_EQ(e.param, param) << body.dump() << ": " << e.message;
    }
  }
  ApiError e = err(with_schema(json::parse(R"({"properties":{"a":{"not":{"required":["b"]}}}})")));
  EXPECT_EQ(e.message.rfind("response_format.json_schema.schema: 'not' at /properties/a/not: ", 0),
            0u) << e.message;
  EXPECT_EQ(e.code, "invalid_schema");
  model.grammar_compiler = nullptr;  // a server without one refuses, never ignores
  EXPECT_EQ(err({{"guided_regex", "a"}}).param, "guided_regex");
}

TEST_F(StructuredRequest, ToolsAreReadAndForcedCallsConstrained) {
  EXPECT_EQ(model.tool_calls.format, ToolCallFormat::kHermes);  // chatml reads no tools
  EXPECT_FALSE(model.tool_calls.template_uses_tools);
  CompletionRequest r = ok_text(std::string(R"({"messages":[{"role":"user","content":"hi"}],"tools":[)") +
                               kWeatherText + "," + kTime.dump() + "]}");
  EXPECT_EQ(r.tool_call_format, ToolCallFormat::kHermes);
  EXPECT_FALSE(r.constraint);  // auto, and <tool_call> is no single token here: free output
  EXPECT_TRUE(r.parallel_tool_calls);
  // The system block lists the tools, in the order their keys were sent.
  const std::string p = prompt(r);
  EXPECT_NE(p.find("<|im_start|>system\n# Tools"), std::string::npos) << p;
  EXPECT_NE(p.find(R"({"type":"function","function":{"name":"get_weather","description")"),
            std::string::npos) << p;

  r = ok({{"tools", {kWeather, kTime}}, {"tool_choice", "required"}, {"parallel_tool_calls", false}});
  ASSERT_TRUE(r.constraint);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(r.constraint->triggers.empty());
  EXPECT_TRUE(grammar_takes(*r.constraint,
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"days\":3}}\n</tool_call>"));
  EXPECT_TRUE(grammar_takes(*r.constraint,
      "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_FALSE(grammar_takes(*r.constraint,  // days out of the schema's range
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"days\":9}}\n</tool_call>"));
  r = ok({{"tools", {kWeather, kTime}},
          {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}});
  EXPECT_FALSE(grammar_takes(*r.constraint,
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\",\"days\":3}}\n</tool_call>"));
  EXPECT_TRUE(grammar_takes(*r.constraint,
      "<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>"));
  // tool_choice none: no parsing, no constraint, and the model is not told of the tools.
  r = ok({{"tools", {kWeather}}, {"tool_choice", "none"}});
  EXPECT_EQ(r.tool_call_format, ToolCallFormat::kNone);
  EXPECT_EQ(prompt(r).find("get_weather"), std::string::npos);
}

TEST_F(StructuredRequest, BadToolsAre400sNamingTheParameter) {
  json bad_params = kWeather;
  bad_params["function"]["parameters"]["properties"]["city"]["not"] = {{"required", {"b"}}};
  json no_name = kWeather;
  no_name["function"].erase("name");
  json bad_name = kWeather;
  bad_name["function"]["name"] = "get weather";
  json extra = kWeather;
  extra["function"]["examples"] = 1;
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"tools", kWeather}}, "tools"},
      {{{"tools", {{{"type", "retrieval"}}}}}, "tools[0].type"},
      {{{"tools", {{{"type", "function"}}}}}, "tools[0].function"},
      {{{"tools", {no_name}}}, "tools[0].function.name"},
      {{{"tools", {kTime, bad_name}}}, "tools[1].function.name"},
      {{{"tools", {kTime, kTime}}}, "tools[1].function.name"},
      {{{"tools", {extra}}}, "tools[0].function.examples"},
      {{{"tools", {bad_params}}}, "tools[0].function.parameters"},
      {{{"tools", {kWeather}}, {"tool_choice", "always"}}, "tool_choice"},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
       "tool_choice"},
      {{{"tools", {kWeather}}, {"tool_choice", {{"type", "function"}}}}, "tool_choice"},
      {{{"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", {kWeather}}, {"parallel_tool_calls", "yes"}}, "parallel_tool_calls"},
      {{{"tools", {kWeather}}, {"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"messages", {{{"role", "tool"}, {"content", "21C"}}}}}, "messages[0].tool_call_id"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_call_id", "c"}}}}},
       "messages[0].tool_call_id"},
      {{{"messages", {{{"role", "user"}, {"content", "x"}, {"tool_calls", json::array()}}}}},
       "messages[0].tool_calls"},
      {{{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"id", "c"}, {"type", "function"},
          {"function", {{"name", "f"}, {"arguments", "{oops"}}}}}}}}}},
       "messages[0].tool_calls[0].function.arguments"},
      {{{"messages", {{{"role", "assistant"}, {"tool_calls", {{{"id", "c"}}}}}}}},
       "messages[0].tool_calls[0].function"},
  };
  for (const auto& [body, param] : cases) {
    ApiError e = err(body);
    EXPECT_EQ(e.status, 400) << body.dump();
    EXPECT_EQ(e.param, param) << body.dump() << ": " << e.message;
  }
  ApiError e = err({{"tools", {bad_params}}});
  EXPECT_NE(e.message.find("'not' at /properties/city/not"),
            std::string::npos) << e.message;
}

TEST_F(StructuredRequest, ToolMessagesWithoutTemplateSupportBecomeText) {
  json messages = json::parse(R"([{"role":"user","content":"Weather in Oslo?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\",\"days\":1}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"21C"}])");
  const std::string p = prompt(ok({{"messages", messages}, {"tools", {kWeather}}}));
  EXPECT_NE(p.find("<|im_start|>assistant\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":"
                   "{\"city\":\"Oslo\",\"days\":1}}\n</tool_call><|im_end|>"), std::string::npos) << p;
  EXPECT_NE(p.find("<|im_start|>user\n<tool_response>\n21C\n</tool_response><|im_end|>"),
            std::string::npos) << p;
}

TEST_F(StructuredRequest, ATemplateThatReadsToolsSeesThemAndTheCalls) {
  const std::string path = ::testing::TempDir() + "/flashserve_tools.jinja";
  std::ofstream(path) << "{% if tools %}TOOLS{{ tools | tojson }}\n{% endif %}"
      "{% for m in messages %}[{{ m.role }}]{% if m.content is none %}NONE{% else %}"
      "{{ m.content }}{% endif %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}"
      "{% for c in m.tool_calls or [] %}CALL {{ c.function.name }} "
      "{{ c.function.arguments | tojson }} {{ c.function.arguments.city }}{% endfor %}\n{% endfor %}";
  use_template(path);
  EXPECT_TRUE(model.tool_calls.template_uses_tools);
  json messages = json::parse(R"([{"role":"user","content":"Weather?"},
    {"role":"assistant","tool_calls":[{"id":"call_1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\",\"days\":1}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"21C"}])");
  const std::string p =
      prompt(ok_text(R"({"messages":)" + messages.dump() + R"(,"tools":[)" + kWeatherText + "]}"));
  EXPECT_NE(p.find(R"(TOOLS[{"type": "function", "function": {"name": "get_weather", )"
                   R"("description": "Weather of a city", "parameters": {"type": "object", )"
                   R"("properties": {"city": {"type": "string"}, "days")"), std::string::npos) << p;
  EXPECT_NE(p.find(R"([assistant]NONECALL get_weather {"city": "Oslo", "days": 1} Oslo)"),
            std::string::npos) << p;
  EXPECT_NE(p.find("[tool]21C#call_1"), std::string::npos) << p;
}

// A vocabulary whose tool-call markers are single special tokens (as Qwen's and Mistral's are).
class MarkerTokenizer : public testing::FakeTokenizer {
 public:
  std::vector<SpecialToken> special_tokens() const override {
    return {{"</tool_call>", 260}, {"[TOOL_CALLS]", 261}, {"<tool_call>", 259}, {"</s>", 2}, {"<s>", 1}};
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> plain;
    for (int32_t id : ids) {
      if (id < 259) plain.push_back(id);
    }
    return FakeTokenizer::decode(plain);
  }
};

TEST_F(StructuredRequest, MarkerTokensTriggerTheGrammar) {
  MarkerTokenizer markers;
  for (const char* parser : {"hermes", "mistral"}) {
    model.tool_calls = tool_call_syntax(parser, "", true, markers);
    const bool hermes = std::string(parser) == "hermes";
    EXPECT_EQ(model.tool_calls.start_id, hermes ? 259 : 261);
    EXPECT_EQ(model.tool_calls.end_id, hermes ? 260 : -1);
    EXPECT_EQ(model.tool_calls.silent_ids.size(), hermes ? 2u : 1u);
    const json tools = {{"tools", {kWeather}}};
    json required = tools;
    required["tool_choice"] = "required";
    CompletionRequest r = ok(required);
    ASSERT_TRUE(r.constraint);
    EXPECT_EQ(r.constraint->triggers, std::vector<int32_t>{hermes ? 259 : 261});
    EXPECT_TRUE(r.constraint->must_trigger);
    EXPECT_EQ(r.constraint->end_tokens, std::vector<int32_t>{hermes ? 260 : 2});
    EXPECT_EQ(r.marker_ids, model.tool_calls.silent_ids);
    const std::string call = R"({"name":"get_weather","arguments":{"city":"Oslo","days":2}})";
    EXPECT_TRUE(grammar_takes(*r.constraint, hermes ? "\n" + call + "\n" : "[" + call + "]"));
    r = ok(tools);  // auto: the same grammar, lazily
    ASSERT_TRUE(r.constraint);
    EXPECT_FALSE(r.constraint->must_trigger);
  }
}

TEST(ToolCallBody, EachFunctionsRefsAreRebased) {
  request::ToolsRequest tools;
  tools.tools = nlohmann::ordered_json::array({nlohmann::ordered_json::parse(R"({"type":"function",
      "function":{"name":"tree","parameters":{"$defs":{"node":{"type":"object","properties":{
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["kids"]}},
      "$ref":"#/$defs/node"}}})")});
  auto body = request::call_body_schema(ToolCallFormat::kMistral, tools, {"tree"});
  EXPECT_EQ(body["items"]["anyOf"][0]["properties"]["arguments"]["$ref"],
            "#/items/anyOf/0/properties/arguments/$defs/node");
  structured::Grammar g = structured::compile_json_schema_between("[TOOL_CALLS]", body.dump(), "");
  EXPECT_FALSE(g.rules.empty());
  body = request::call_body_schema(ToolCallFormat::kLlama3Json, tools, {"tree"});
  EXPECT_TRUE(body["anyOf"][0]["properties"].contains("parameters"));
}

TEST(ToolCallOutput, WholeAndStreamedAgree) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}"
      "\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  for (bool parallel : {true, false}) {
    std::string reason = "stop";
    json m = tool_call_message(ToolCallFormat::kHermes, text, parallel, 7, &reason);
    EXPECT_EQ(reason, "tool_calls");
    EXPECT_EQ(m["content"], "Let me check.");
    ASSERT_EQ(m["tool_calls"].size(), parallel ? 2u : 1u) << m.dump();
    EXPECT_EQ(m["tool_calls"][0]["type"], "function");
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
              json::parse(R"({"city":"Oslo"})"));
    for (size_t split = 1; split < text.size(); split += 7) {
      ToolCallDeltas d(ToolCallFormat::kHermes, parallel, 7);
      std::vector<json> out = d.push(text.substr(0, split));
      for (json& x : d.push(text.substr(split))) out.push_back(x);
      for (json& x : d.finish()) out.push_back(x);
      std::string content;
      json calls = json::array();
      for (const json& x : out) {
        if (x.contains("content")) content += x["content"].get<std::string>();
        for (const json& c : x.value("tool_calls", json::array())) {
          const size_t i = c["index"];
          if (c.contains("id")) {
            ASSERT_EQ(i, calls.size());
            calls.push_back(c);
          } else {
            ASSERT_LT(i, calls.size());
            calls[i]["function"]["arguments"] =
                calls[i]["function"]["arguments"].get<std::string>() +
                c["function"]["arguments"].get<std::string>();
          }
        }
      }
      for (json& c : calls) c.erase("index");
      EXPECT_TRUE(d.called());
      EXPECT_EQ(content, m["content"].get<std::string>());
      EXPECT_EQ(calls, m["tool_calls"]) << split;
    }
  }
  std::string reason = "length";
  json plain = tool_call_message(ToolCallFormat::kHermes, " just text ", true, 1, &reason);
  EXPECT_EQ(plain, json({{"role", "assistant"}, {"content", "just text"}}));
  EXPECT_EQ(reason, "length");
}

}  // namespace
}  // namespace flashserve
