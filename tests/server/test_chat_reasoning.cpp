// Reasoning models at the API edge (label unit): chat_template_kwargs and reasoning_effort reach
// a Qwen 3 style template as variables (reserved names and bad values are 400s), the prompt that
// opens <think> is detected, --reasoning-parser's choice, and the response assembly on a fixed
// output: message.reasoning_content whole, delta.reasoning_content streamed one byte per token,
// and tool calls parsed from the content after </think>.
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "server/endpoints/chat_request.h"
#include "tests/server/fake_engine.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

// Qwen 3's switch in small: with enable_thinking false the prompt closes an empty <think>.
constexpr const char* kQwen3Style =
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{%- endif %}{% endif %}{% if greeting is defined %}{{ greeting }}{% endif %}";
// DeepSeek-R1 in small: the prompt opens <think> itself.
constexpr const char* kR1Style =
    "{%- for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    "{%- if add_generation_prompt %}assistant: <think>\n{% endif %}";

class ChatReasoning : public ::testing::Test {
 protected:
  void use_template(const char* source) {
    model.chat_template = std::make_shared<ChatTemplate>(source, "test", "<s>", "</s>");
    model.reasoning = reasoning_parser_enabled("auto", model.chat_template.get());
  }
  void SetUp() override { use_template(kQwen3Style); }

  std::variant<CompletionRequest, ApiError> parse(json body) {
    body["messages"] = json::array({{{"role", "user"}, {"content", "hi"}}});
    return parse_chat_request(body.dump(), model, tok);
  }
  std::string prompt(const json& body) {
    auto r = parse(body);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << body.dump() << " -> " << e->message;
      return "";
    }
    return tok.decode(std::get<CompletionRequest>(r).prompts.at(0));
  }
  ApiError err(const json& body) {
    auto r = parse(body);
    if (auto* e = std::get_if<ApiError>(&r)) return *e;
    ADD_FAILURE() << body.dump() << " was accepted";
    return {};
  }
  static bool closes_think(const std::string& p) {
    return p.find("<think>\n\n</think>") != std::string::npos;
  }

  testing::FakeTokenizer tok;
  ServedModel model{"stories", 512, 262, 1700000000};
};

TEST_F(ChatReasoning, KwargsReachTheTemplate) {
  EXPECT_FALSE(closes_think(prompt(json::object())));
  EXPECT_TRUE(closes_think(prompt({{"chat_template_kwargs", {{"enable_thinking", false}}}})));
  EXPECT_FALSE(closes_think(prompt({{"chat_template_kwargs", {{"enable_thinking", true}}}})));
  const std::string p = prompt({{"chat_template_kwargs", {{"greeting", "Hello"}}}});
  EXPECT_EQ(p.substr(p.size() - 5), "Hello") << p;
}

TEST_F(ChatReasoning, KwargsMustBeAnObjectWithoutReservedNames) {
  EXPECT_EQ(err({{"chat_template_kwargs", "x"}}).param, "chat_template_kwargs");
  EXPECT_EQ(err({{"chat_template_kwargs", json::array()}}).status, 400);
  for (const std::string& name : ChatTemplate::reserved_variables()) {
    const ApiError e = err({{"chat_template_kwargs", {{name, 1}}}});
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "chat_template_kwargs." + name);
  }
  EXPECT_TRUE(std::holds_alternative<CompletionRequest>(parse({{"chat_template_kwargs", nullptr}})));
}

TEST_F(ChatReasoning, ReasoningEffortDrivesTheSwitch) {
  EXPECT_TRUE(closes_think(prompt({{"reasoning_effort", "none"}})));
  EXPECT_TRUE(closes_think(prompt({{"reasoning_effort", "minimal"}})));
  for (const char* e : {"low", "medium", "high"}) {
    EXPECT_FALSE(closes_think(prompt({{"reasoning_effort", e}})));
  }
  // The kwargs win over the effort.
  EXPECT_FALSE(closes_think(prompt(
      {{"reasoning_effort", "none"}, {"chat_template_kwargs", {{"enable_thinking", true}}}})));
  // Levels past high (xhigh, max) are high: the highest a template knows.
  for (const char* e : {"xhigh", "max"}) {
    EXPECT_EQ(prompt({{"reasoning_effort", e}}), prompt({{"reasoning_effort", "high"}})) << e;
  }
  EXPECT_EQ(err({{"reasoning_effort", "extreme"}}).param, "reasoning_effort");
  EXPECT_EQ(err({{"reasoning_effort", 3}}).param, "reasoning_effort");
  // A template without the switch accepts it and renders the same prompt.
  use_template(kR1Style);
  EXPECT_EQ(prompt({{"reasoning_effort", "none"}}), prompt(json::object()));
}

TEST_F(ChatReasoning, ParserChoiceAndPromptThatOpensThink) {
  EXPECT_TRUE(model.reasoning);  // auto: the template speaks of <think>
  auto r = std::get<CompletionRequest>(parse(json::object()));
  EXPECT_TRUE(r.reasoning);
  EXPECT_FALSE(r.starts_in_reasoning);
  use_template(kR1Style);
  r = std::get<CompletionRequest>(parse(json::object()));
  EXPECT_TRUE(r.reasoning);
  EXPECT_TRUE(r.starts_in_reasoning);

  ChatTemplate chatml = ChatTemplate::from_flag("chatml", "<s>", "</s>");
  EXPECT_FALSE(reasoning_parser_enabled("auto", &chatml));
  EXPECT_FALSE(reasoning_parser_enabled("auto", nullptr));
  EXPECT_TRUE(reasoning_parser_enabled("qwen3", &chatml));
  EXPECT_TRUE(reasoning_parser_enabled("deepseek_r1", nullptr));
  EXPECT_FALSE(reasoning_parser_enabled("none", model.chat_template.get()));
  EXPECT_THROW(reasoning_parser_enabled("o1", nullptr), Error);
  model.reasoning = false;
  r = std::get<CompletionRequest>(parse(json::object()));
  EXPECT_FALSE(r.reasoning);
  EXPECT_FALSE(r.starts_in_reasoning);
}

// Response assembly on a fixed output, one byte per token, so the stream splits at every byte.
class ReasoningAssembly : public testing::FakeEngineTest {
 protected:

  CompletionRequest request(const std::string& output, bool starts_in_reasoning) {
    CompletionRequest r = testing::scripted_chat_request(engine, output, FinishReason::kStop);
    r.starts_in_reasoning = starts_in_reasoning;
    return r;
  }
  json whole(const CompletionRequest& r) {
    return testing::run_whole(ctx, r).body["choices"][0];
  }
  // The streamed deltas joined per field.
  std::map<std::string, std::string> streamed(const CompletionRequest& r) {
    std::map<std::string, std::string> out;
    for (const json& chunk : testing::run_streamed(ctx, r)) {
      const json& ch = chunk["choices"][0];
      for (const auto& [k, v] : ch["delta"].items()) {
        if (v.is_string()) out[k] += v.get<std::string>();
      }
      for (const json& t : ch["delta"].value("tool_calls", json::array())) {
        if (t.contains("id")) out["call"] += t["function"]["name"].get<std::string>();
        out["arguments"] += t["function"]["arguments"].get<std::string>();
      }
      if (!ch["finish_reason"].is_null()) out["finish"] = ch["finish_reason"];
    }
    return out;
  }
};

TEST_F(ReasoningAssembly, WholeAndStreamedAgree) {
  struct Case {
    std::string output;
    bool starts_in_reasoning;
    json reasoning;  // null: none
    std::string content;
  };
  const std::vector<Case> cases = {
      {"<think>\nWhy? Because.\n</think>\n\nThe answer.", false, "Why? Because.", "The answer."},
      {"Because.</think>Answer", true, "Because.", "Answer"},
      {"  <think>cut short", false, "cut short", ""},
      {"no thinking here", false, nullptr, "no thinking here"},
      {"a <think> inside</think> stays", false, nullptr, "a <think> inside</think> stays"},
      {"\xE2\x82\xAC</think>\xC3\xA9", true, "\xE2\x82\xAC", "\xC3\xA9"},
  };
  for (const Case& k : cases) {
    const CompletionRequest r = request(k.output, k.starts_in_reasoning);
    const json choice = whole(r);
    EXPECT_EQ(choice["message"]["reasoning_content"], k.reasoning) << k.output;
    EXPECT_EQ(choice["message"]["content"], k.content) << k.output;
    EXPECT_EQ(choice["finish_reason"], "stop");
    auto parts = streamed(r);
    const std::string reasoning = k.reasoning.is_null() ? "" : k.reasoning.get<std::string>();
    EXPECT_EQ(parts["reasoning_content"], reasoning) << k.output;
    EXPECT_EQ(parts["content"], k.content) << k.output;
    EXPECT_EQ(parts["finish"], "stop");
  }
}

TEST_F(ReasoningAssembly, ToolCallsAreParsedAfterTheReasoning) {
  const std::string call = R"(<tool_call>{"name":"f","arguments":{"a":1}}</tool_call>)";
  CompletionRequest r = request("<think>I need f. <tool_call>no</tool_call></think>" + call, false);
  r.tool_call_format = output_parsers::ToolCallFormat::kHermes;
  const json choice = whole(r);
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << choice.dump();
  EXPECT_EQ(choice["message"]["reasoning_content"], "I need f. <tool_call>no</tool_call>");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice.dump();
  const json& fn = choice["message"]["tool_calls"][0]["function"];
  EXPECT_EQ(fn["name"], "f");
  auto parts = streamed(r);
  EXPECT_EQ(parts["reasoning_content"], "I need f. <tool_call>no</tool_call>");
  EXPECT_EQ(parts["call"], "f");
  EXPECT_EQ(json::parse(parts["arguments"]), json::parse(fn["arguments"].get<std::string>()));
  EXPECT_EQ(parts["finish"], "tool_calls");
}

}  // namespace
}  // namespace flashserve
