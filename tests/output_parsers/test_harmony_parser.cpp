// The harmony parser on fixed gpt-oss outputs (written from the harmony format's documentation):
// reasoning, final answers, tool calls in both header orders, several calls, preambles, output
// cut off anywhere, and broken output (unknown channels, recipients that were not offered, text
// outside any message). Every split of each output, at every byte and into single bytes, streams
// to the whole-text parse in OpenAI's delta shape.
#include <gtest/gtest.h>

#include "output_parsers/harmony_parser.h"
#include "tests/output_parsers/stream_join.h"

namespace flashserve::output_parsers {
namespace {

constexpr uint64_t kSeed = 7;
const std::vector<std::string> kTools = {"get_weather", "get_time"};

struct Call {
  std::string name, arguments;
};

struct Case {
  std::string label, text;
  std::string reasoning, content;
  std::vector<Call> calls;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"reasoning_then_final",
       "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|>"
       "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
       "User asks 2+2. Answer 4.", "2 + 2 = 4.", {}},
      {"end_of_answer_removed_as_eos",
       "<|channel|>analysis<|message|>Größe 🤔 ok<|end|>"
       "<|start|>assistant<|channel|>final<|message|>Sure: «yes».",
       "Größe 🤔 ok", "Sure: «yes».", {}},
      {"call_with_constrain",
       "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>"
       "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
       "Need the weather.", "", {{"get_weather", "{\"city\":\"Paris\"}"}}},
      {"call_recipient_in_role",
       "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
       "{\"city\": \"Oslo\"}<|call|>",
       "", "", {{"get_weather", "{\"city\": \"Oslo\"}"}}},
      {"two_calls",
       "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"A\"}"
       "<|call|><|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
       "<|message|>{}<|call|>",
       "", "", {{"get_weather", "{\"city\":\"A\"}"}, {"get_time", "{}"}}},
      {"preamble_then_call",
       "<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>"
       "commentary to=functions.get_time <|constrain|>json<|message|>{\"tz\":\"UTC\"}<|call|>",
       "", "Let me check.", {{"get_time", "{\"tz\":\"UTC\"}"}}},
      {"two_reasoning_messages_joined_by_newline",
       "<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|>"
       "two<|end|><|start|>assistant<|channel|>final<|message|>three<|return|>",
       "one\ntwo", "three", {}},
      {"recipient_not_offered_is_content",
       "<|channel|>commentary to=functions.delete_all <|constrain|>json<|message|>{\"x\":1}<|call|>",
       "", "{\"x\":1}", {}},
      {"builtin_tool_is_content",
       "<|channel|>analysis to=python code<|message|>print(1)<|call|>", "", "print(1)", {}},
      {"unknown_channel_is_content",
       "<|channel|>secret<|message|>hidden?<|end|><|start|>assistant<|channel|>final<|message|>"
       "ok<|return|>",
       "", "hidden?\nok", {}},
      {"plain_text_is_content", "Hello there, plain text with <|no|> header.", "",
       "Hello there, plain text with <|no|> header.", {}},
      {"broken_then_a_message", "garbage<|start|>assistant<|channel|>final<|message|>ok<|end|>",
       "", "garbage\nok", {}},
      {"other_role_is_broken", "<|start|>user<|message|>hi<|end|>", "",
       "<|start|>user<|message|>hi<|end|>", {}},
      {"cut_inside_a_header",
       "<|channel|>analysis<|message|>Thinking<|end|><|start|>assistant<|channel|>fin", "Thinking",
       "", {}},
      {"cut_inside_the_first_header", "<|channel|>analy", "", "", {}},
      {"cut_inside_the_answer",
       "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>The an",
       "r", "The an", {}},
      {"cut_inside_arguments",
       "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Pa",
       "", "", {{"get_weather", "{\"city\":\"Pa"}}},
      {"cut_inside_an_end_marker", "<|channel|>final<|message|>Done<|en", "", "Done", {}},
      {"end_marker_missing", "<|channel|>analysis<|message|>think<|start|>assistant<|channel|>"
       "final<|message|>ans", "think", "ans", {}},
      {"marker_like_text_in_a_body", "<|channel|>final<|message|>if a<|b then <|x|><|return|>", "",
       "if a<|b then <|x|>", {}},
      {"header_too_long_is_content",
       "<|channel|>final " + std::string(300, 'a') + "<|message|>x", "",
       "<|channel|>final " + std::string(300, 'a') + "<|message|>x", {}},
      {"empty_output", "", "", "", {}},
  };
  return c;
}

// Runs the stream over `pieces` and joins what it sends, checking the delta shape.
struct Joined {
  std::string reasoning;
  testing::JoinedStream calls;
};

Joined stream(const std::vector<std::string>& functions, const std::vector<std::string_view>& pieces) {
  HarmonyStream s(functions, kSeed);
  Joined j;
  auto take = [&](const HarmonyDelta& d) {
    j.reasoning += d.reasoning_content;
    testing::join_events(d.events, j.calls);
  };
  for (std::string_view p : pieces) take(s.push(p));
  take(s.finish());
  if (s.num_calls() != static_cast<int>(j.calls.output.tool_calls.size())) {
    j.calls.problem = "num_calls() disagrees with the events";
  }
  return j;
}

void expect_stream_matches_whole(const Case& c, const std::vector<std::string_view>& pieces,
                                 const std::string& how) {
  const HarmonyOutput whole = parse_harmony(c.text, kTools, kSeed);
  const Joined j = stream(kTools, pieces);
  ParsedOutput as_parsed{whole.content, whole.tool_calls};
  EXPECT_EQ(j.calls.problem, "") << c.label << ", " << how;
  EXPECT_EQ(j.reasoning, whole.reasoning_content) << c.label << ", " << how;
  EXPECT_EQ(testing::parse_difference(j.calls.output, as_parsed), "") << c.label << ", " << how;
}

TEST(HarmonyParser, WholeOutputs) {
  for (const Case& c : cases()) {
    const HarmonyOutput out = parse_harmony(c.text, kTools, kSeed);
    EXPECT_EQ(out.reasoning_content, c.reasoning) << c.label;
    EXPECT_EQ(out.content, c.content) << c.label;
    ASSERT_EQ(out.tool_calls.size(), c.calls.size()) << c.label;
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(out.tool_calls[i].name, c.calls[i].name) << c.label;
      EXPECT_EQ(out.tool_calls[i].arguments, c.calls[i].arguments) << c.label;
      EXPECT_EQ(out.tool_calls[i].id.rfind("call_", 0), 0u) << c.label;
    }
  }
}

TEST(HarmonyParser, EveryTwoPieceSplitStreamsToWholeParse) {
  for (const Case& c : cases()) {
    const std::string_view t = c.text;
    for (size_t cut = 0; cut <= t.size(); ++cut) {
      expect_stream_matches_whole(c, {t.substr(0, cut), t.substr(cut)},
                                  "split at byte " + std::to_string(cut));
    }
  }
}

TEST(HarmonyParser, SingleBytesStreamToWholeParse) {
  for (const Case& c : cases()) {
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < c.text.size(); ++i) bytes.push_back(std::string_view(c.text).substr(i, 1));
    expect_stream_matches_whole(c, bytes, "single bytes");
  }
}

TEST(HarmonyParser, NoToolsOfferedMeansNoCalls) {
  const HarmonyOutput out = parse_harmony(
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|>", {},
      kSeed);
  EXPECT_TRUE(out.tool_calls.empty());
  EXPECT_EQ(out.content, "{}");
}

TEST(HarmonyParser, HoldsHeadersAndSendsBodiesAsTheyCome) {
  HarmonyStream s(kTools, kSeed);
  // A header in progress sends nothing, whatever it turns out to be.
  for (std::string_view p : {"<|chan", "nel|>analysis", "<|mess"}) {
    const HarmonyDelta d = s.push(p);
    EXPECT_EQ(d.reasoning_content, "") << p;
    EXPECT_TRUE(d.events.empty()) << p;
  }
  EXPECT_EQ(s.push("age|>Th").reasoning_content, "Th");
  EXPECT_EQ(s.push("ink<|e").reasoning_content, "ink");  // "<|e" may begin <|end|>
  HarmonyDelta d = s.push("nd|><|start|>assistant<|channel|>commentary to=functions.get_time "
                          "<|constrain|>json<|message|>{\"tz\"");
  ASSERT_EQ(d.events.size(), 2u);
  EXPECT_EQ(d.events[0].name, "get_time");  // the call opens as soon as its header is read
  EXPECT_EQ(d.events[1].arguments, "{\"tz\"");
  d = s.push(":1}");
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].index, 0);
  EXPECT_EQ(d.events[0].arguments, ":1}");
  EXPECT_TRUE(s.finish().events.empty());
  EXPECT_EQ(s.num_calls(), 1);
}

TEST(HarmonyParser, PlainTextStreamsWithoutWaiting) {
  HarmonyStream s(kTools, kSeed);
  const HarmonyDelta d = s.push("Hello");
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].content, "Hello");
}

TEST(HarmonyHeader, Forms) {
  using S = HarmonyHeader::Status;
  struct H {
    std::string text;
    bool complete, first;
    S status;
    std::string channel, recipient;
  };
  const std::vector<H> hs = {
      {"<|channel|>final", true, true, S::kComplete, "final", ""},
      {"<|start|>assistant<|channel|>final", true, false, S::kComplete, "final", ""},
      {"<|channel|>final", true, false, S::kInvalid},  // later messages start with <|start|>
      {"<|channel|>commentary to=functions.f <|constrain|>json", true, true, S::kComplete,
       "commentary", "functions.f"},
      {"<|start|>assistant to=functions.f<|channel|>commentary json", true, false, S::kComplete,
       "commentary", "functions.f"},
      {"<|start|>assistant to=functions.f", true, false, S::kInvalid},  // no channel
      {"<|start|>assistant to=functions.f", false, false, S::kPartial},
      {"<|start|>assist", false, false, S::kPartial},
      {"<|st", false, true, S::kPartial},
      {"", false, true, S::kPartial},
      {"", true, true, S::kInvalid},
      {"<|channel|>final<|channel|>analysis", true, true, S::kInvalid},  // two channels
      {"<|channel|>", false, true, S::kPartial},
      {"<|channel|>final extra words", true, true, S::kInvalid},
      {"<|channel|>final\n", false, true, S::kInvalid},
      {"<|start|>system<|channel|>final", true, false, S::kInvalid},
      {"<|channel|>commentary t", false, true, S::kPartial},  // may become to=
  };
  for (const H& h : hs) {
    const HarmonyHeader got = parse_harmony_header(h.text, h.complete, h.first);
    EXPECT_EQ(got.status, h.status) << h.text;
    if (h.status != S::kComplete) continue;
    EXPECT_EQ(got.channel, h.channel) << h.text;
    EXPECT_EQ(got.recipient, h.recipient) << h.text;
  }
}

TEST(HarmonyParser, TemplateDetection) {
  EXPECT_TRUE(template_is_harmony("{{- '<|start|>assistant<|channel|>final<|message|>' }}"));
  EXPECT_FALSE(template_is_harmony("<|im_start|>assistant\n<think>"));
}

}  // namespace
}  // namespace flashserve::output_parsers
