// The chat client's prompt templates: exact renderings of a two-turn conversation with and
// without a system prompt in each format, template names, and stop strings.
#include <gtest/gtest.h>

#include "chat_cli/chat_template.h"

namespace flashserve::chat {
namespace {

const std::vector<Turn> kTurns = {{"Hi", "Hello!"}, {"How are you?", "Fine."}};

TEST(ChatTemplate, Names) {
  for (const char* n : {"server", "plain", "llama2", "chatml", "zephyr"}) {
    auto k = parse_template_kind(n);
    ASSERT_TRUE(k) << n;
    EXPECT_EQ(template_name(*k), n);
  }
  EXPECT_EQ(parse_template_kind("llama-2"), TemplateKind::kLlama2);  // the spelling
  EXPECT_FALSE(parse_template_kind("Plain"));
  EXPECT_FALSE(parse_template_kind(""));
  EXPECT_FALSE(parse_template_kind("llama3"));
  // The server's template: no local stop strings; rendered plain only for the size estimate.
  EXPECT_TRUE(stop_strings(TemplateKind::kServer).empty());
  EXPECT_EQ(render_prompt(TemplateKind::kServer, "S", kTurns, "Bye"),
            render_prompt(TemplateKind::kPlain, "S", kTurns, "Bye"));
}

TEST(ChatTemplate, Plain) {
  EXPECT_EQ(render_prompt(TemplateKind::kPlain, "", {}, "Tell me"), "User: Tell me\nAssistant:");
  EXPECT_EQ(render_prompt(TemplateKind::kPlain, "Be brief.", kTurns, "Bye"),
            "Be brief.\n\nUser: Hi\nAssistant: Hello!\nUser: How are you?\nAssistant: Fine.\n"
            "User: Bye\nAssistant:");
  EXPECT_EQ(stop_strings(TemplateKind::kPlain), std::vector<std::string>{"\nUser:"});
}

TEST(ChatTemplate, Llama2) {
  EXPECT_EQ(render_prompt(TemplateKind::kLlama2, "", {}, "Tell me"), "[INST] Tell me [/INST]");
  EXPECT_EQ(render_prompt(TemplateKind::kLlama2, "Be brief.", {}, "Tell me"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nTell me [/INST]");
  // The system block goes in the first [INST] only; exchanges are closed by </s> and the next
  // one opens with <s> (the first <s> is the server's BOS).
  EXPECT_EQ(render_prompt(TemplateKind::kLlama2, "Be brief.", kTurns, "Bye"),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
            "<s>[INST] How are you? [/INST] Fine. </s>"
            "<s>[INST] Bye [/INST]");
  EXPECT_EQ(render_prompt(TemplateKind::kLlama2, "", {{"Hi", "Yo"}}, "Bye"),
            "[INST] Hi [/INST] Yo </s><s>[INST] Bye [/INST]");
  auto stops = stop_strings(TemplateKind::kLlama2);
  EXPECT_NE(std::find(stops.begin(), stops.end(), "</s>"), stops.end());
}

// A block format: the prompt alone, and after a system prompt and one exchange; `stop` ends a reply.
void expect_block_format(TemplateKind kind, const std::string& alone, const std::string& full,
                         const std::string& stop) {
  EXPECT_EQ(render_prompt(kind, "", {}, "Tell me"), alone);
  EXPECT_EQ(render_prompt(kind, "Be brief.", {{"Hi", "Hello!"}}, "Bye"), full);
  auto stops = stop_strings(kind);
  EXPECT_NE(std::find(stops.begin(), stops.end(), stop), stops.end());
}

TEST(ChatTemplate, Chatml) {
  expect_block_format(TemplateKind::kChatml, "<|im_start|>user\nTell me<|im_end|>\n<|im_start|>assistant\n",
                      "<|im_start|>system\nBe brief.<|im_end|>\n"
                      "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
                      "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n",
                      "<|im_end|>");
}

TEST(ChatTemplate, Zephyr) {
  expect_block_format(TemplateKind::kZephyr, "<|user|>\nTell me</s>\n<|assistant|>\n",
                      "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello!</s>\n"
                      "<|user|>\nBye</s>\n<|assistant|>\n",
                      "</s>");
}

// Every template keeps every message, in order, in the rendered prompt.
TEST(ChatTemplate, AllKeepEveryMessageInOrder) {
  for (auto kind : {TemplateKind::kPlain, TemplateKind::kLlama2, TemplateKind::kChatml,
                    TemplateKind::kZephyr}) {
    std::string p = render_prompt(kind, "SYS-1", kTurns, "LAST-9");
    size_t pos = 0;
    for (const char* part : {"SYS-1", "Hi", "Hello!", "How are you?", "Fine.", "LAST-9"}) {
      size_t at = p.find(part, pos);
      ASSERT_NE(at, std::string::npos) << template_name(kind) << ": " << part << " in " << p;
      pos = at;
    }
    EXPECT_EQ(p.find("SYS-1"), render_prompt(kind, "SYS-1", {}, "x").find("SYS-1"));
  }
}

}  // namespace
}  // namespace flashserve::chat
