// ToolCallStream against parse_tool_calls: for every fixture, every split of the output into two
// pieces at every byte, and into single bytes, joins to the whole-text parse in OpenAI's delta
// shape. Also what is held back and when it is released.
#include <gtest/gtest.h>

#include "output_parsers/tool_call_parser.h"
#include "tests/output_parsers/stream_join.h"
#include "tests/output_parsers/tool_call_fixtures.h"

namespace flashserve::output_parsers {
namespace {

constexpr uint64_t kSeed = 99;

void expect_joins_to_whole(const testing::ToolCallFixture& f,
                           const std::vector<std::string_view>& pieces, const std::string& how) {
  const ParsedOutput whole = parse_tool_calls(f.format, f.text, kSeed);
  const testing::JoinedStream j = testing::join_tool_call_stream(f.format, kSeed, pieces);
  EXPECT_EQ(j.problem, "") << f.label << ", " << how;
  EXPECT_EQ(testing::parse_difference(j.output, whole), "") << f.label << ", " << how;
}

TEST(ToolCallStream, EveryTwoPieceSplitJoinsToWholeParse) {
  for (const auto& f : testing::tool_call_fixtures()) {
    const std::string_view text = f.text;
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      expect_joins_to_whole(f, {text.substr(0, cut), text.substr(cut)},
                            "split at byte " + std::to_string(cut));
    }
  }
}

TEST(ToolCallStream, SingleBytesJoinToWholeParseAndStreamArguments) {
  for (const auto& f : testing::tool_call_fixtures()) {
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < f.text.size(); ++i) bytes.push_back(std::string_view(f.text).substr(i, 1));
    expect_joins_to_whole(f, bytes, "single bytes");
    // Arguments arrive byte by byte as the model writes them (after the name), not in one piece
    // at the end; only a call that writes its arguments before its name sends them at once.
    if (f.label.find("arguments_first") != std::string::npos) continue;
    size_t argument_bytes = 0;
    for (const auto& c : f.calls) argument_bytes += c.arguments.size();
    const auto j = testing::join_tool_call_stream(f.format, kSeed, bytes);
    EXPECT_EQ(j.argument_pieces, argument_bytes) << f.label;
  }
}

std::string contents(const std::vector<ToolCallEvent>& events) {
  std::string out;
  for (const auto& e : events) out += e.index < 0 ? e.content : "|call|";
  return out;
}

TEST(ToolCallStream, PossibleMarkerIsHeldThenReleased) {
  ToolCallStream s(ToolCallFormat::kHermes, kSeed);
  EXPECT_EQ(contents(s.push("Use the ")), "Use the");  // trailing space waits for what follows
  EXPECT_EQ(contents(s.push("<tool")), "");
  EXPECT_EQ(contents(s.push("> tag")), " <tool> tag");
  EXPECT_EQ(contents(s.push(" or <tool_ca")), " or");
  EXPECT_EQ(contents(s.finish()), " <tool_ca");
}

TEST(ToolCallStream, CallPiecesComeInOpenAIOrder) {
  ToolCallStream s(ToolCallFormat::kHermes, kSeed);
  EXPECT_EQ(contents(s.push("Checking.\n<tool_call>\n{\"name\": \"get_weather\", ")), "Checking.");
  std::vector<ToolCallEvent> e = s.push("\"arguments\": {\"ci");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].index, 0);
  EXPECT_EQ(e[0].name, "get_weather");
  EXPECT_EQ(e[0].id.size(), 29u);
  EXPECT_EQ(e[0].arguments, "{\"ci");
  e = s.push("ty\": \"Oslo\"}}\n</tool_call>");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].index, 0);
  EXPECT_TRUE(e[0].id.empty() && e[0].name.empty());
  EXPECT_EQ(e[0].arguments, "ty\": \"Oslo\"}");
  EXPECT_TRUE(s.finish().empty());
  EXPECT_EQ(s.num_calls(), 1);
}

TEST(ToolCallStream, NoneStreamsVerbatim) {
  ToolCallStream s(ToolCallFormat::kNone, kSeed);
  EXPECT_EQ(contents(s.push(" <tool_call>")), " <tool_call>");
  EXPECT_EQ(contents(s.push("\n")), "\n");
  EXPECT_TRUE(s.finish().empty());
}

}  // namespace
}  // namespace flashserve::output_parsers
