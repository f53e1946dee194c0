// gpt-oss's harmony format at the API edge (label unit), with the model's own chat_template.jinja
// (tests/chat_template/gpt_oss): the prompts it renders (reasoning effort in the system message,
// tools as a TypeScript namespace, earlier reasoning kept before a call and dropped before an
// answer, tool results as messages from functions.NAME), forced calls (the header in the prompt,
// the arguments under a grammar), and the response assembly on fixed outputs: reasoning_content,
// tool_calls and content, whole and streamed one byte per token.
#include <gtest/gtest.h>

#include <ctime>
#include <map>
#include <memory>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "server/endpoints/chat_request.h"
#include "structured/compiled_grammar.h"
#include "structured/token_vocabulary.h"
#include "structured/vocab_trie.h"
#include "tests/server/fake_engine.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kMarkers = {"<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                                           "<|constrain|>", "<|return|>", "<|call|>"};
constexpr int32_t kFirstMarker = 262;

// FakeTokenizer with harmony's seven markers as special tokens (ids 262..268, decoding to
// nothing, as o200k_harmony's do).
class HarmonyTokenizer : public testing::FakeTokenizer {
 public:
  std::vector<SpecialToken> special_tokens() const override {
    std::vector<SpecialToken> s = FakeTokenizer::special_tokens();
    for (size_t i = 0; i < kMarkers.size(); ++i) s.push_back({kMarkers[i], kFirstMarker + int32_t(i)});
    return s;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> plain;
    for (int32_t id : ids) {
      if (id < kFirstMarker) plain.push_back(id);
    }
    return FakeTokenizer::decode(plain);
  }
  std::string piece(int32_t id) const override {
    return id >= kFirstMarker ? kMarkers[id - kFirstMarker] : FakeTokenizer::piece(id);
  }
  int vocab_size() const override { return kFirstMarker + int(kMarkers.size()); }
  // The prompt as text, markers spelled out: the check that they became special ids.
  std::string spell(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids) {
      if (id >= kFirstMarker) out += piece(id);
      if (id >= 3 && id < 259) out += static_cast<char>(id - 3);  // FakeTokenizer's byte ids
    }
    return out;
  }
  int32_t id_of(const std::string& marker) const {
    for (size_t i = 0; i < kMarkers.size(); ++i) {
      if (kMarkers[i] == marker) return kFirstMarker + int32_t(i);
    }
    return -1;
  }
};

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[16];
  return std::string(buf, std::strftime(buf, sizeof buf, "%Y-%m-%d", &local));
}

std::string system_message(const std::string& effort, bool tools) {
  return "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
         "Knowledge cutoff: 2024-06\nCurrent date: " + today() + "\n\nReasoning: " + effort +
         "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
         "message." + (tools ? "\nCalls to these tools must go to the commentary channel: "
                               "'functions'." : "") + "<|end|>";
}

const char* kWeather = R"({"type":"function","function":{"name":"get_weather",
  "description":"Weather in a city","parameters":{"type":"object","properties":{
  "city":{"type":"string","description":"The city"},"days":{"type":"integer"}},
  "required":["city"]}}})";
const char* kTime = R"({"type":"function","function":{"name":"get_time","description":"Now",
  "parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}})";
const std::string kWeatherNamespace =
    "# Tools\n\n## functions\n\nnamespace functions {\n\n// Weather in a city\n"
    "type get_weather = (_: {\n// The city\ncity: string,\ndays?: number,\n}) => any;\n\n"
    "} // namespace functions";

class ChatHarmony : public ::testing::Test {
 protected:
  void SetUp() override {
    model.chat_template = std::make_shared<ChatTemplate>(ChatTemplate::from_flag(
        std::string(FS_SOURCE_DIR) + "/tests/chat_template/gpt_oss/chat_template.jinja",
        "<|startoftext|>", "<|return|>"));
    model.eos_ids = {2};
    model.tool_calls = tool_call_syntax("auto", model.chat_template->source(),
                                        model.chat_template->uses_tools(), tok);
    model.grammar_compiler = std::make_shared<structured::GrammarCompiler>(
        std::make_shared<const structured::VocabTrie>(structured::vocabulary_from_tokenizer(
            tok, model.vocab_size, {2}, model.tool_calls.grammar_spelled_ids)));
  }
  std::variant<CompletionRequest, ApiError> parse(const std::string& body) {
    return parse_chat_request(body, model, tok);
  }
  CompletionRequest ok(const std::string& body) {
    auto r = parse(body);
    if (auto* e = std::get_if<ApiError>(&r)) {
      ADD_FAILURE() << body << " -> " << e->message;
      return {};
    }
    return std::get<CompletionRequest>(r);
  }
  std::string prompt(const std::string& body) {
    const CompletionRequest r = ok(body);
    return r.prompts.empty() ? "" : tok.spell(r.prompts[0]);
  }

  HarmonyTokenizer tok;
  ServedModel model{"gpt-oss", 8192, kFirstMarker + 7, 1700000000};
};

TEST_F(ChatHarmony, TheTemplateIsDetectedAsHarmony) {
  EXPECT_EQ(model.tool_calls.format, output_parsers::ToolCallFormat::kHarmony);
  EXPECT_EQ(model.tool_calls.end_id, tok.id_of("<|call|>"));
  EXPECT_EQ(model.tool_calls.message_id, tok.id_of("<|message|>"));
  EXPECT_EQ(model.tool_calls.silent_ids.size(), kMarkers.size());
  const CompletionRequest r = ok(R"({"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_TRUE(r.harmony);
  EXPECT_FALSE(r.reasoning);  // harmony carries its own reasoning
  EXPECT_EQ(r.marker_ids.size(), kMarkers.size());
}

TEST_F(ChatHarmony, ReasoningEffortReachesTheSystemMessage) {
  const std::string user = R"("messages":[{"role":"user","content":"2+2?"}])";
  const std::string tail = "<|start|>user<|message|>2+2?<|end|><|start|>assistant";
  EXPECT_EQ(prompt("{" + user + "}"), system_message("medium", false) + tail);
  for (auto [effort, level] : std::vector<std::pair<std::string, std::string>>{
           {"low", "low"}, {"medium", "medium"}, {"high", "high"}, {"xhigh", "high"},
           {"max", "high"}, {"none", "low"}, {"minimal", "low"}}) {
    EXPECT_EQ(prompt("{" + user + R"(,"reasoning_effort":")" + effort + "\"}"),
              system_message(level, false) + tail) << effort;
  }
  // chat_template_kwargs name the template's variable directly, and win.
  EXPECT_EQ(prompt("{" + user + R"(,"reasoning_effort":"low",
                   "chat_template_kwargs":{"reasoning_effort":"high"}})"),
            system_message("high", false) + tail);
}

TEST_F(ChatHarmony, ToolTurnsRenderAsHarmonyMessages) {
  // An OpenAI client's conversation: a call (content null) with its reasoning, its result.
  const std::string body = std::string(R"({"tools":[)") + kWeather + R"(],"messages":[
      {"role":"system","content":"Be brief."},
      {"role":"user","content":"Weather in Paris?"},
      {"role":"assistant","content":null,"reasoning_content":"Need the tool.","tool_calls":[
        {"id":"call_1","type":"function","function":{"name":"get_weather",
         "arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"{\"temp\": 21}"}]})";
  EXPECT_EQ(prompt(body),
            system_message("medium", true) +
                "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n" + kWeatherNamespace +
                "<|end|><|start|>user<|message|>Weather in Paris?<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"
                "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                "{\"city\": \"Paris\"}<|call|>"
                "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
                "\"{\\\"temp\\\": 21}\"<|end|><|start|>assistant");
}

TEST_F(ChatHarmony, ReasoningBeforeAnAnswerIsDropped) {
  EXPECT_EQ(prompt(R"({"messages":[{"role":"user","content":"hi"},
      {"role":"assistant","content":"Hello!","reasoning_content":"greet them"},
      {"role":"user","content":"2+2?"}]})"),
            system_message("medium", false) +
                "<|start|>user<|message|>hi<|end|><|start|>assistant<|channel|>final<|message|>"
                "Hello!<|end|><|start|>user<|message|>2+2?<|end|><|start|>assistant");
  // Bad reasoning fields are 400s naming themselves.
  auto r = parse(R"({"messages":[{"role":"assistant","content":"x","reasoning_content":3}]})");
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).param, "messages[0].reasoning_content");
  r = parse(R"({"messages":[{"role":"user","content":"x","reasoning":"y"}]})");
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).param, "messages[0].reasoning");
}

TEST_F(ChatHarmony, ForcedCallsStartInThePrompt) {
  const std::string user = R"("messages":[{"role":"user","content":"Paris?"}])";
  const std::string end = "<|start|>user<|message|>Paris?<|end|><|start|>assistant";
  // A named function: the whole header; the arguments follow its schema from the first token
  // and end at <|call|>.
  CompletionRequest r = ok(std::string(R"({"tools":[)") + kWeather + "," + kTime + "]," + user +
                           R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}}})");
  const std::string header = "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>";
  std::string p = tok.spell(r.prompts.at(0));
  EXPECT_EQ(p.substr(p.size() - end.size() - header.size()), end + header);
  EXPECT_EQ(r.harmony_prefill, header);
  ASSERT_TRUE(r.constraint.has_value());
  EXPECT_TRUE(r.constraint->triggers.empty());
  EXPECT_EQ(r.constraint->end_tokens, std::vector<int32_t>{tok.id_of("<|call|>")});
  EXPECT_EQ(r.harmony_functions, (std::vector<std::string>{"get_weather", "get_time"}));
  // required with one tool: the same, for that tool.
  r = ok(std::string(R"({"tools":[)") + kWeather + "]," + user + R"(,"tool_choice":"required"})");
  EXPECT_EQ(r.harmony_prefill,
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
  // required with several: the prompt stops before the name, which the grammar chooses, with
  // the rest of the header (its markers spelled by their tokens) and that function's arguments.
  r = ok(std::string(R"({"tools":[)") + kWeather + "," + kTime + "]," + user +
         R"(,"tool_choice":"required"})");
  p = tok.spell(r.prompts.at(0));
  const std::string open = "<|channel|>commentary to=functions.";
  EXPECT_EQ(p.substr(p.size() - open.size()), open);
  ASSERT_TRUE(r.constraint.has_value());
  EXPECT_TRUE(r.constraint->triggers.empty());
  EXPECT_EQ(model.tool_calls.grammar_spelled_ids,
            (std::vector<int32_t>{tok.id_of("<|constrain|>"), tok.id_of("<|message|>")}));
  // auto and none: a free output; none shows no tools and offers no function to call.
  r = ok(std::string(R"({"tools":[)") + kWeather + "]," + user + "}");
  EXPECT_EQ(r.harmony_prefill, "");
  EXPECT_FALSE(r.constraint.has_value());
  r = ok(std::string(R"({"tools":[)") + kWeather + "]," + user + R"(,"tool_choice":"none"})");
  EXPECT_TRUE(r.harmony_functions.empty());
  EXPECT_EQ(tok.spell(r.prompts.at(0)).find("namespace functions"), std::string::npos);
  // A response_format constrains the final channel's message, which the prompt opens.
  r = ok("{" + user + R"(,"response_format":{"type":"json_object"}})");
  EXPECT_EQ(r.harmony_prefill, "<|channel|>final<|message|>");
}

// Response assembly on fixed outputs, one byte per token, so the stream splits at every byte.
class HarmonyAssembly : public testing::FakeEngineTest {
 protected:
  CompletionRequest request(const std::string& output) {
    CompletionRequest r = testing::scripted_chat_request(engine, output, FinishReason::kStop);
    r.reasoning = false;
    r.harmony = true;
    r.harmony_functions = {"get_weather", "get_time"};
    return r;
  }
  json whole(const CompletionRequest& r) { return testing::run_whole(ctx, r).body["choices"][0]; }
  // The streamed deltas joined per field; calls as "name(arguments)" in order.
  std::map<std::string, std::string> streamed(const CompletionRequest& r) {
    std::map<std::string, std::string> out;
    std::map<int, std::string> calls;
    for (const json& chunk : testing::run_streamed(ctx, r)) {
      const json& ch = chunk["choices"][0];
      for (const auto& [k, v] : ch["delta"].items()) {
        if (v.is_string()) out[k] += v.get<std::string>();
      }
      for (const json& t : ch["delta"].value("tool_calls", json::array())) {
        const int i = t["index"];
        if (t.contains("id")) calls[i] += t["function"]["name"].get<std::string>() + "(";
        calls[i] += t["function"]["arguments"].get<std::string>();
      }
      if (!ch["finish_reason"].is_null()) out["finish"] = ch["finish_reason"];
    }
    for (auto& [i, c] : calls) out["calls"] += c + ")";
    return out;
  }
  static std::string calls_of(const json& message) {
    std::string s;
    for (const json& t : message.value("tool_calls", json::array())) {
      s += t["function"]["name"].get<std::string>() + "(" +
           t["function"]["arguments"].get<std::string>() + ")";
    }
    return s;
  }
};

TEST_F(HarmonyAssembly, WholeAndStreamedAgree) {
  struct Case {
    std::string output;
    json reasoning;  // null: none
    json content;    // null beside calls
    std::string calls, finish;
  };
  const std::vector<Case> cases = {
      {"<|channel|>analysis<|message|>Easy: 4.<|end|><|start|>assistant<|channel|>final"
       "<|message|>2 + 2 = 4.", "Easy: 4.", "2 + 2 = 4.", "", "stop"},
      {"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
       "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
       "Need weather.", nullptr, "get_weather({\"city\":\"Paris\"})", "tool_calls"},
      {"<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{\"path\":\"/\"}",
       nullptr, "{\"path\":\"/\"}", "", "stop"},
      {"not harmony at all \xE2\x82\xAC", nullptr, "not harmony at all \xE2\x82\xAC", "", "stop"},
      {"<|channel|>analysis<|message|>cut <|end|><|start|>assistant<|channel|>fi", "cut ", "", "",
       "stop"},
  };
  for (const Case& k : cases) {
    const CompletionRequest r = request(k.output);
    const json choice = whole(r);
    EXPECT_EQ(choice["message"]["reasoning_content"], k.reasoning) << k.output;
    EXPECT_EQ(choice["message"]["content"], k.content) << k.output;
    EXPECT_EQ(calls_of(choice["message"]), k.calls) << k.output;
    EXPECT_EQ(choice["finish_reason"], k.finish) << k.output;
    auto parts = streamed(r);
    EXPECT_EQ(parts["reasoning_content"], k.reasoning.is_null() ? "" : k.reasoning.get<std::string>())
        << k.output;
    EXPECT_EQ(parts["content"], k.content.is_null() ? "" : k.content.get<std::string>()) << k.output;
    EXPECT_EQ(parts["calls"], k.calls) << k.output;
    EXPECT_EQ(parts["finish"], k.finish) << k.output;
  }
}

TEST_F(HarmonyAssembly, ForcedCallOutputIsTheArgumentsAlone) {
  CompletionRequest r = request("{\"tz\":\"UTC\"}");
  r.harmony_prefill = "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>";
  const json choice = whole(r);
  EXPECT_EQ(calls_of(choice["message"]), "get_time({\"tz\":\"UTC\"})") << choice.dump();
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(streamed(r)["calls"], "get_time({\"tz\":\"UTC\"})");
}

TEST_F(HarmonyAssembly, ParallelFalseKeepsTheFirstCall) {
  CompletionRequest r = request(
      "<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{}<|call|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"city\":\"Oslo\"}<|call|>");
  EXPECT_EQ(calls_of(whole(r)["message"]), "get_time({})get_weather({\"city\":\"Oslo\"})");
  r.parallel_tool_calls = false;
  EXPECT_EQ(calls_of(whole(r)["message"]), "get_time({})");
  EXPECT_EQ(streamed(r)["calls"], "get_time({})");
}

}  // namespace
}  // namespace flashserve
