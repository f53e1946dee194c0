// Unit tests of ChatTemplate: loading (tokenizer_config.json forms, chat_template.jinja, built-in
// names, files), literal ranges, refusal of unsupported constructs at load time, runtime errors
// and the limits that bound hostile templates. Rendering correctness against jinja2 itself is
// test_chat_oracle's job.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <atomic>
#include <thread>

#include "chat_template/chat_template.h"

using namespace flashserve;
namespace fs = std::filesystem;

namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

ChatTemplate make(const std::string& source) { return ChatTemplate(source, "test.jinja", "<s>", "</s>"); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// The substrings of `r.text` the literal ranges cover.
std::vector<std::string> literal_pieces(const RenderedChat& r) {
  std::vector<std::string> out;
  for (auto [b, e] : r.literal) out.push_back(r.text.substr(b, e - b));
  return out;
}

// A scratch model folder under the build tree, emptied for each test.
class ModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(FS_BINARY_DIR) / "chat_template_test" /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

const std::vector<ChatMessage> kHello = {{"user", "hi", ""}};

}  // namespace

// ---- loading ----

TEST_F(ModelDir, TokenizerConfigStringTemplateAndTokenForms) {
  write("tokenizer_config.json", R"({"chat_template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
    "bos_token": {"content": "<BOS>", "lstrip": false}, "eos_token": "<EOS>"})");
  auto t = ChatTemplate::from_model_dir(dir(), "fb", "fe");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->origin(), dir() + "/tokenizer_config.json");
  EXPECT_EQ(t->bos_token(), "<BOS>");
  EXPECT_EQ(t->eos_token(), "<EOS>");
  EXPECT_EQ(t->render(kHello, false).text, "<BOS>hi<EOS>");
}

TEST_F(ModelDir, NullTokensFallBack) {
  write("tokenizer_config.json", R"({"chat_template": "x", "bos_token": null})");
  auto t = ChatTemplate::from_model_dir(dir(), "fb", "fe");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->bos_token(), "fb");
  EXPECT_EQ(t->eos_token(), "fe");
}

TEST_F(ModelDir, ListFormUsesDefault) {
  write("tokenizer_config.json", R"({"chat_template": [
    {"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "DEFAULT"}]})");
  auto t = ChatTemplate::from_model_dir(dir(), "", "");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(kHello, false).text, "DEFAULT");
}

TEST_F(ModelDir, ListFormWithoutDefaultNamesWhatItHas) {
  write("tokenizer_config.json", R"({"chat_template": [
    {"name": "tool_use", "template": "A"}, {"name": "rag", "template": "B"}]})");
  const std::string err = error_of([&] { ChatTemplate::from_model_dir(dir(), "", ""); });
  EXPECT_NE(err.find("tokenizer_config.json"), std::string::npos) << err;
  EXPECT_NE(err.find("tool_use, rag"), std::string::npos) << err;
}

TEST_F(ModelDir, JinjaFileBesideTheConfig) {
  write("tokenizer_config.json", R"({"bos_token": "<B>"})");
  write("chat_template.jinja", "{{ bos_token }}[{{ messages | length }}]\n");
  auto t = ChatTemplate::from_model_dir(dir(), "", "");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->origin(), dir() + "/chat_template.jinja");
  EXPECT_EQ(t->render(kHello, false).text, "<B>[1]");  // jinja2 drops one trailing newline
}

TEST_F(ModelDir, JinjaFileWinsOverTheConfigAsInTransformers) {
  write("tokenizer_config.json", R"({"chat_template": "FROM CONFIG"})");
  write("chat_template.jinja", "FROM FILE");
  auto t = ChatTemplate::from_model_dir(dir(), "", "");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->render(kHello, false).text, "FROM FILE");
}

TEST_F(ModelDir, NoTemplateIsNullopt) {
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir(), "", "").has_value());
  write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": null})");
  EXPECT_FALSE(ChatTemplate::from_model_dir(dir(), "", "").has_value());
}

TEST_F(ModelDir, BadTemplateNamesFileAndLine) {
  write("chat_template.jinja", "line one\n{% if x %}\n{{ 1 + }}\n{% endif %}");
  const std::string err = error_of([&] { ChatTemplate::from_model_dir(dir(), "", ""); });
  EXPECT_NE(err.find(dir() + "/chat_template.jinja: line 3: "), std::string::npos) << err;
}

TEST_F(ModelDir, BadConfigJsonNamesTheFile) {
  write("tokenizer_config.json", "{not json");
  const std::string err = error_of([&] { ChatTemplate::from_model_dir(dir(), "", ""); });
  EXPECT_NE(err.find("tokenizer_config.json: not valid JSON"), std::string::npos) << err;
}

TEST_F(ModelDir, FlagTakesAFile) {
  write("my.jinja", "{% for m in messages %}{{ m.role }}{% endfor %}");
  const ChatTemplate t = ChatTemplate::from_flag(dir() + "/my.jinja", "", "");
  EXPECT_EQ(t.origin(), dir() + "/my.jinja");
  EXPECT_EQ(t.render(kHello, false).text, "user");
}

TEST(ChatTemplate, FlagTakesEveryBuiltinName) {
  const auto names = ChatTemplate::builtin_names();
  EXPECT_EQ(names, (std::vector<std::string>{"llama-2", "llama-3", "chatml", "mistral", "zephyr"}));
  for (const auto& name : names) {
    const ChatTemplate t = ChatTemplate::from_flag(name, "<s>", "</s>");
    EXPECT_EQ(t.origin(), "builtin:" + name);
    EXPECT_FALSE(t.render(kHello, true).text.empty()) << name;
  }
}

TEST(ChatTemplate, FlagRejectsAnUnknownNameListingTheBuiltins) {
  const std::string err = error_of([] { ChatTemplate::from_flag("no-such-template", "", ""); });
  EXPECT_NE(err.find("no-such-template"), std::string::npos) << err;
  EXPECT_NE(err.find("llama-2, llama-3, chatml, mistral, zephyr"), std::string::npos) << err;
}

TEST(ChatTemplate, BuiltinFormats) {
  const std::vector<ChatMessage> conv = {{"system", "S", ""}, {"user", "U", ""}, {"assistant", "A", ""},
                                         {"user", "V", ""}};
  EXPECT_EQ(ChatTemplate::from_flag("chatml", "<s>", "</s>").render(conv, true).text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
            "A<|im_end|>\n<|im_start|>user\nV<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate::from_flag("llama-2", "<s>", "</s>").render(conv, true).text,
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU [/INST] A </s><s>[INST] V [/INST]");
  EXPECT_EQ(ChatTemplate::from_flag("llama-3", "<|begin_of_text|>", "").render(conv, true).text,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nV<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate::from_flag("mistral", "<s>", "</s>").render(conv, true).text,
            "<s>[INST] S\n\nU [/INST] A</s>[INST] V [/INST]");
  EXPECT_EQ(ChatTemplate::from_flag("zephyr", "<s>", "</s>").render(conv, true).text,
            "<|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\nA</s>\n<|user|>\nV</s>\n<|assistant|>\n");
}

// ---- raise_exception and runtime errors ----

TEST(ChatTemplate, RaiseExceptionCarriesTheMessageVerbatim) {
  const ChatTemplate t = ChatTemplate::from_flag("mistral", "<s>", "</s>");
  try {
    t.render({{"user", "a", ""}, {"user", "b", ""}}, true);
    FAIL() << "no error";
  } catch (const ChatTemplateError& e) {
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplate, RuntimeErrorsAreChatTemplateErrorsWithOriginAndLine) {
  const ChatTemplate t = make("ok\n{{ messages[0].content }}\n{{ nothing.attr }}");
  try {
    t.render(kHello, false);
    FAIL() << "no error";
  } catch (const ChatTemplateError& e) {
    EXPECT_EQ(std::string(e.what()), "test.jinja: line 3: 'nothing' is undefined");
  }
  EXPECT_THROW(make("{{ 1 + 'a' }}").render(kHello, false), ChatTemplateError);
  EXPECT_THROW(make("{{ messages[0].content.nope.deeper }}").render(kHello, false), ChatTemplateError);
  EXPECT_THROW(make("{{ 1 // 0 }}").render(kHello, false), ChatTemplateError);
  EXPECT_THROW(make("{{ 9223372036854775807 + 1 }}").render(kHello, false), ChatTemplateError);
  EXPECT_THROW(make("{{ nothing() }}").render(kHello, false), ChatTemplateError);
  EXPECT_THROW(make("{% set x = 1 %}{% set x.a = 2 %}").render(kHello, false), ChatTemplateError);
  EXPECT_THROW(make("{{ nothing | tojson }}").render(kHello, false), ChatTemplateError);
}

// ---- refused at construction ----

TEST(ChatTemplate, UnsupportedConstructsFailAtLoadWithTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"a\nb\n{% include 'x.jinja' %}", "test.jinja: line 3: unsupported tag 'include'"},
      {"{% extends 'base' %}", "test.jinja: line 1: unsupported tag 'extends'"},
      {"\n{% import 'm' as m %}", "test.jinja: line 2: unsupported tag 'import'"},
      {"{% raw %}x{% endraw %}", "test.jinja: line 1: unsupported tag 'raw'"},
      {"{% call foo() %}{% endcall %}", "test.jinja: line 1: unsupported tag 'call'"},
      {"{% do x.append(1) %}", "test.jinja: line 1: unsupported tag 'do'"},
      {"x\n\n\n{{ messages | frobnicate }}", "test.jinja: line 4: unsupported filter 'frobnicate'"},
      {"{% if x is frob %}{% endif %}", "test.jinja: line 1: unsupported test 'frob'"},
      {"{% for x in y %}{% endfor %}{% break %}", "test.jinja: line 1: 'break' outside a loop"},
      {"{% for x in y recursive %}{% endfor %}", "test.jinja: line 1: unsupported: recursive loops"},
      {"{{ 1 < 2 < 3 }}", "test.jinja: line 1: chained comparisons"},
      {"{% if x %}never closed", "test.jinja: line 1: unexpected end of template, expected 'elif' or 'else' or 'endif'"},
      {"{{ 'unterminated }}", "test.jinja: line 1: unterminated string"},
      {"{# open comment", "test.jinja: line 1: missing end of comment tag"},
      {"{{ x ", "test.jinja: line 1: missing end of '}}'"},
      {"{{ f(*args) }}", "test.jinja: line 1: unsupported: *args"},
      {"{% endfor %}", "test.jinja: line 1: unsupported tag 'endfor'"},
  };
  for (const auto& [source, want] : cases) {
    const std::string err = error_of([&, &source = source] { make(source); });
    EXPECT_EQ(err.rfind(want, 0), 0u) << "source: " << source << "\nerror: " << err;
  }
}

// ---- literal ranges ----

TEST(ChatTemplateLiteral, SpecialTokenTextInContentIsLiteral) {
  const ChatTemplate t = ChatTemplate::from_flag("chatml", "", "");
  const RenderedChat r = t.render({{"user", "<|im_end|>hi", ""}}, true);
  EXPECT_EQ(r.text, "<|im_start|>user\n<|im_end|>hi<|im_end|>\n<|im_start|>assistant\n");
  const size_t at = std::string("<|im_start|>user\n").size();
  EXPECT_EQ(r.literal, (Ranges{{at, at + 12}}));
}

TEST(ChatTemplateLiteral, TrimShiftsTheRange) {
  const RenderedChat r =
      make("[{{ messages[0].content | trim }}]").render({{"user", "  <s> x \n", ""}}, false);
  EXPECT_EQ(r.text, "[<s> x]");
  EXPECT_EQ(r.literal, (Ranges{{1, 6}}));
}

TEST(ChatTemplateLiteral, SlicesIndexingAndMethodsKeepExactRanges) {
  const RenderedChat r = make(
      "{% set c = messages[0].content %}{{ c[2:5] }}|{{ c[0] }}|{{ c.strip('ab') }}|{{ c.split(' ')[1] }}|{{ 'T' ~ c[:1] ~ 'T' }}")
      .render({{"user", "abXYZ cd", ""}}, false);
  EXPECT_EQ(r.text, "XYZ|a|XYZ cd|cd|TaT");
  EXPECT_EQ(literal_pieces(r), (std::vector<std::string>{"XYZ", "a", "XYZ cd", "cd", "a"}));
}

TEST(ChatTemplateLiteral, NameIsLiteralRoleIsNot) {
  const RenderedChat r = make("{% for m in messages %}{{ m.role }}:{{ m.name }}:{{ m.content }}{% endfor %}")
                             .render({{"user", "C", "N"}}, false);
  EXPECT_EQ(r.text, "user:N:C");
  EXPECT_EQ(literal_pieces(r), (std::vector<std::string>{"N", "C"}));
}

TEST(ChatTemplateLiteral, TransformationsMarkTheWholeResult) {
  const RenderedChat r =
      make("{{ messages[0].content | upper }}|{{ messages[0].content.replace('a', 'b') }}|{{ messages[0] | tojson }}|{{ 'plain' | upper }}")
          .render({{"user", "a<s>", ""}}, false);
  EXPECT_EQ(r.text, "A<S>|b<s>|{\"role\": \"user\", \"content\": \"a<s>\"}|PLAIN");
  EXPECT_EQ(literal_pieces(r),
            (std::vector<std::string>{"A<S>", "b<s>", "{\"role\": \"user\", \"content\": \"a<s>\"}"}));
}

TEST(ChatTemplateLiteral, TemplateTextIsNeverLiteralAndAdjacentContentsMerge) {
  const RenderedChat r = make("<s>{{ messages[0].content }}{{ messages[1].content }}</s>")
                             .render({{"user", "x", ""}, {"assistant", "y", ""}}, false);
  EXPECT_EQ(r.text, "<s>xy</s>");
  EXPECT_EQ(r.literal, (Ranges{{3, 5}}));
}

TEST(ChatTemplateLiteral, EmptyContentHasNoRange) {
  const RenderedChat r = ChatTemplate::from_flag("chatml", "", "").render({{"user", "", ""}}, false);
  EXPECT_TRUE(r.literal.empty());
}

TEST(ChatTemplateLiteral, MacrosAndSetBlocksCarryRanges) {
  const RenderedChat r =
      make("{% macro q(x) %}<{{ x }}>{% endmacro %}{% set b %}[{{ messages[0].content }}]{% endset %}{{ q(messages[0].content) }}{{ b }}")
          .render({{"user", "é", ""}}, false);
  EXPECT_EQ(r.text, "<é>[é]");
  EXPECT_EQ(literal_pieces(r), (std::vector<std::string>{"é", "é"}));
}

// ---- limits ----

TEST(ChatTemplateLimits, HostileTemplatesStopWithAnError) {
  // Work: 10^5 x 10^5 iterations.
  EXPECT_THROW(make("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                   .render(kHello, false),
               ChatTemplateError);
  // Output size: doubling a string.
  EXPECT_THROW(make("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}")
                   .render(kHello, false),
               ChatTemplateError);
  EXPECT_THROW(make("{{ 'x' * 1000000000 }}").render(kHello, false), ChatTemplateError);
  // Recursion.
  EXPECT_THROW(make("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").render(kHello, false),
               ChatTemplateError);
  EXPECT_THROW(make("{{ range(1000000) | length }}").render(kHello, false), ChatTemplateError);
  // Memory: lists.
  EXPECT_THROW(make("{{ ([1] * 100000000) | length }}").render(kHello, false), ChatTemplateError);
  EXPECT_THROW(make("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}")
                   .render(kHello, false),
               ChatTemplateError);
  EXPECT_THROW(make("{{ (' ' * 1000000).split(' ') | length }}").render(kHello, false), ChatTemplateError);
}

TEST(ChatTemplateLimits, DeepNestingIsRefusedAtLoad) {
  EXPECT_THROW(make("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), Error);
  std::string ifs;
  for (int i = 0; i < 1000; ++i) ifs += "{% if true %}";
  EXPECT_THROW(make(ifs), Error);
}

// ---- concurrency ----

// The HTTP threads share one ChatTemplate: render is const and keeps no state between calls.
TEST(ChatTemplate, RendersConcurrently) {
  const ChatTemplate t = make(
      "{% macro q(x) %}[{{ x | trim }}]{% endmacro %}{% set ns = namespace(n=0) %}"
      "{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ q(m.content) }}{{ loop.cycle('a', 'b') }}{% endfor %}{{ ns.n }}");
  const std::vector<ChatMessage> conv = {{"user", " x ", ""}, {"assistant", "y", ""}};
  const RenderedChat want = t.render(conv, false);
  ASSERT_EQ(want.text, "[x]a[y]b2");
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        const RenderedChat got = t.render(conv, false);
        if (got.text != want.text || got.literal != want.literal) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}
