// parse_tool_calls on whole outputs of each format (tool_call_fixtures.h), the call ids, and the
// choice of a format from a chat template or the --tool-call-parser name.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "output_parsers/tool_call_parser.h"
#include "tests/output_parsers/tool_call_fixtures.h"

namespace flashserve::output_parsers {
namespace {

TEST(ToolCallParse, FixturesParseAsExpected) {
  for (const auto& f : testing::tool_call_fixtures()) {
    SCOPED_TRACE(f.label);
    const ParsedOutput out = parse_tool_calls(f.format, f.text, 7);
    EXPECT_EQ(out.content, f.content);
    ASSERT_EQ(out.tool_calls.size(), f.calls.size());
    for (size_t i = 0; i < f.calls.size(); ++i) {
      EXPECT_EQ(out.tool_calls[i].name, f.calls[i].name);
      EXPECT_EQ(out.tool_calls[i].arguments, f.calls[i].arguments);
    }
  }
}

TEST(ToolCallParse, IdsAreDeterministicPerSeedAndWellFormed) {
  const auto& f = testing::tool_call_fixtures()[0];  // two calls
  const ParsedOutput a = parse_tool_calls(f.format, f.text, 1234);
  const ParsedOutput b = parse_tool_calls(f.format, f.text, 1234);
  const ParsedOutput c = parse_tool_calls(f.format, f.text, 1235);
  ASSERT_EQ(a.tool_calls.size(), 2u);
  std::set<std::string> ids;
  for (size_t i = 0; i < 2; ++i) {
    const std::string& id = a.tool_calls[i].id;
    EXPECT_EQ(id, b.tool_calls[i].id);
    EXPECT_NE(id, c.tool_calls[i].id);
    ASSERT_EQ(id.size(), 29u);
    EXPECT_EQ(id.substr(0, 5), "call_");
    for (char ch : id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch))) << id;
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ToolCallParse, NoneKeepsTheOutputVerbatim) {
  const std::string text = "  <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n";
  const ParsedOutput out = parse_tool_calls(ToolCallFormat::kNone, text, 1);
  EXPECT_EQ(out.content, text);
  EXPECT_TRUE(out.tool_calls.empty());
}

TEST(ToolCallParse, OtherFormatsMarkersAreContent) {
  // A Hermes call is plain text to the Mistral parser and the other way round.
  const std::string hermes = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::kMistral, hermes, 1).content, hermes);
  const std::string mistral = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::kHermes, mistral, 1).content, mistral);
}

TEST(ToolCallFormatChoice, DetectsFromTemplateMarkers) {
  EXPECT_EQ(detect_tool_call_format("{% for tool in tools %}<tool_call>{{ tool }}</tool_call>"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("<|im_start|>{{ m.content }}<tool_call>\\n"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{{ '[TOOL_CALLS]' + tool_calls|tojson }}"),
            ToolCallFormat::kMistral);
  EXPECT_EQ(detect_tool_call_format("{{ '<|python_tag|>' }}"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format("{% if m.role == 'ipython' %}"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_call_format("<|start_header_id|>{{ m.role }}<|end_header_id|>"),
            ToolCallFormat::kLlama3Json);
  // Hermes 3 on Llama 3.1: Llama headers and <tool_call>; the model writes <tool_call>.
  EXPECT_EQ(detect_tool_call_format("<|start_header_id|><tool_call>"), ToolCallFormat::kHermes);
  EXPECT_EQ(detect_tool_call_format("{% for m in messages %}{{ m.content }}{% endfor %}"),
            ToolCallFormat::kNone);
}

TEST(ToolCallFormatChoice, NameOverridesTemplate) {
  const std::string qwen = "<tool_call>";
  EXPECT_EQ(choose_tool_call_format("", qwen), ToolCallFormat::kHermes);
  EXPECT_EQ(choose_tool_call_format("auto", qwen), ToolCallFormat::kHermes);
  EXPECT_EQ(choose_tool_call_format("none", qwen), ToolCallFormat::kNone);
  EXPECT_EQ(choose_tool_call_format("mistral", qwen), ToolCallFormat::kMistral);
  EXPECT_EQ(choose_tool_call_format("llama3_json", qwen), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(choose_tool_call_format("hermes", ""), ToolCallFormat::kHermes);
  for (auto f : {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                 ToolCallFormat::kMistral}) {
    EXPECT_EQ(choose_tool_call_format(tool_call_format_name(f), ""), f);
  }
  try {
    choose_tool_call_format("qwen", qwen);
    ADD_FAILURE() << "accepted an unknown parser name";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tool-call-parser"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace flashserve::output_parsers
