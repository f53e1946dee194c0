// split_reasoning and ReasoningStream on DeepSeek-R1 / Qwen 3 style outputs: with and without the
// opening tag in the output, cut short, false tags; every split of each output streams to the
// whole-text split. Also the prompt and template checks that choose the mode.
#include <gtest/gtest.h>

#include "output_parsers/reasoning_parser.h"

namespace flashserve::output_parsers {
namespace {

struct Case {
  std::string label, text;
  bool starts_in_reasoning;
  std::string reasoning, content;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"qwen3", "<think>\nThe user wants 2+2.\nThat is 4.\n</think>\n\n2 + 2 = 4.", false,
       "The user wants 2+2.\nThat is 4.", "2 + 2 = 4."},
      {"r1_opened_in_prompt", "\nLet me think… «quotes» 🤔\n</think>\n\nThe answer is 42.", true,
       "Let me think… «quotes» 🤔", "The answer is 42."},
      {"opened_in_prompt_and_repeated", "<think>x</think>y", true, "x", "y"},
      {"no_tags", "Just an answer <think> later.", false, "", "Just an answer <think> later."},
      {"no_close_when_opened", "Still thinking", true, "Still thinking", ""},
      {"cut_short", "<think>\nHmm, so the", false, "Hmm, so the", ""},
      {"false_close_tags", "<think>a </thinking> b </think c</think>done", false,
       "a </thinking> b </think c", "done"},
      {"empty_reasoning", "<think>\n\n</think>\n\nHello.", false, "", "Hello."},
      {"tags_after_close_are_content", "<think>r</think>c <think>d</think>", false, "r",
       "c <think>d</think>"},
      {"partial_open_tag_is_content", "  <thi", false, "", "<thi"},
      {"partial_close_tag_at_end", "<think>r </thi", false, "r </thi", ""},
  };
  return c;
}

ReasoningOutput stream(bool starts_in_reasoning, const std::vector<std::string_view>& pieces) {
  ReasoningStream s(starts_in_reasoning);
  ReasoningOutput out;
  auto add = [&](const ReasoningOutput& d) {
    out.reasoning_content += d.reasoning_content;
    out.content += d.content;
  };
  for (std::string_view p : pieces) add(s.push(p));
  add(s.finish());
  return out;
}

TEST(ReasoningParser, WholeSplit) {
  for (const Case& c : cases()) {
    const ReasoningOutput out = split_reasoning(c.text, c.starts_in_reasoning);
    EXPECT_EQ(out.reasoning_content, c.reasoning) << c.label;
    EXPECT_EQ(out.content, c.content) << c.label;
  }
}

TEST(ReasoningParser, EverySplitStreamsToWholeSplit) {
  for (const Case& c : cases()) {
    const std::string_view t = c.text;
    for (size_t cut = 0; cut <= t.size(); ++cut) {
      const ReasoningOutput out = stream(c.starts_in_reasoning, {t.substr(0, cut), t.substr(cut)});
      EXPECT_EQ(out.reasoning_content, c.reasoning) << c.label << " cut " << cut;
      EXPECT_EQ(out.content, c.content) << c.label << " cut " << cut;
    }
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < t.size(); ++i) bytes.push_back(t.substr(i, 1));
    const ReasoningOutput out = stream(c.starts_in_reasoning, bytes);
    EXPECT_EQ(out.reasoning_content, c.reasoning) << c.label << " single bytes";
    EXPECT_EQ(out.content, c.content) << c.label << " single bytes";
  }
}

TEST(ReasoningParser, ReasoningStreamsBeforeTheCloseTag) {
  ReasoningStream s(false);
  EXPECT_EQ(s.push("<think>\nFirst, ").reasoning_content, "First,");
  const ReasoningOutput d = s.push("add.</th");
  EXPECT_EQ(d.reasoning_content, " add.");
  EXPECT_EQ(d.content, "");
  const ReasoningOutput e = s.push("ink>\n\nFour");
  EXPECT_EQ(e.reasoning_content, "");
  EXPECT_EQ(e.content, "Four");
}

TEST(ReasoningParser, PromptOpensReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<｜User｜>hi<｜Assistant｜><think>\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(prompt_opens_reasoning("use <think> tags\nassistant:"));
}

TEST(ReasoningParser, TemplateHasReasoning) {
  EXPECT_TRUE(template_has_reasoning("{% if enable_thinking is false %}<think>\n\n</think>{% endif %}"));
  EXPECT_TRUE(template_has_reasoning("{{ content.split('</think>')[-1] }}"));
  EXPECT_FALSE(template_has_reasoning("<|im_start|>{{ m.role }}"));
}

}  // namespace
}  // namespace flashserve::output_parsers
