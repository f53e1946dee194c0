// Model outputs in each tool-call format with the parse they must give: text before and after
// calls, two calls, unicode and escapes in arguments, false marker starts in prose, malformed and
// cut-short calls. Shared by the whole-text and the streaming tests.
#pragma once

#include <string>
#include <vector>

#include "output_parsers/tool_call_parser.h"

namespace flashserve::output_parsers::testing {

struct ExpectedCall {
  std::string name, arguments;
};

struct ToolCallFixture {
  std::string label;
  ToolCallFormat format;
  std::string text;
  std::string content;
  std::vector<ExpectedCall> calls;
};

inline const std::vector<ToolCallFixture>& tool_call_fixtures() {
  using F = ToolCallFormat;
  static const std::vector<ToolCallFixture> fixtures = {
      {"hermes_two_calls_unicode", F::kHermes,
       "I'll check both cities.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
       "{\"city\": \"Zürich\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
       "\"get_weather\", \"arguments\": {\"city\": \"東京\", \"note\": \"naïve \\\"q\\\" \\u00e9 🚀\"}}"
       "\n</tool_call>",
       "I'll check both cities.",
       {{"get_weather", "{\"city\": \"Zürich\", \"unit\": \"celsius\"}"},
        {"get_weather", "{\"city\": \"東京\", \"note\": \"naïve \\\"q\\\" \\u00e9 🚀\"}"}}},
      {"hermes_false_markers", F::kHermes,
       "Wrap it in a <tool> element, or set <tool_call_id> on the reply, then end with <tool_call",
       "Wrap it in a <tool> element, or set <tool_call_id> on the reply, then end with <tool_call",
       {}},
      {"hermes_bad_json_stays_content", F::kHermes,
       "Calling now.\n<tool_call>\n{name: get_weather, city: Paris}\n</tool_call>\n",
       "Calling now.\n<tool_call>\n{name: get_weather, city: Paris}\n</tool_call>", {}},
      {"hermes_cut_short", F::kHermes,
       "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"flash attent", "",
       {{"search", "{\"query\": \"flash attent"}}},
      {"hermes_cut_in_end_marker", F::kHermes,
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</to",
       "", {{"get_weather", "{\"city\": \"Paris\"}"}}},
      {"hermes_arguments_first_text_after", F::kHermes,
       "<tool_call>{\"arguments\": {\"n\": [1, 2.5e-3, -0, true, null]}, \"name\": \"stats\"}"
       "</tool_call>\nDone.",
       "Done.", {{"stats", "{\"n\": [1, 2.5e-3, -0, true, null]}"}}},
      {"hermes_broken_after_name", F::kHermes,
       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1,}}\n</tool_call>",
       "}}\n</tool_call>", {{"f", "{\"a\": 1,"}}},
      {"hermes_name_without_arguments", F::kHermes, "<tool_call>{\"name\": \"now\"}</tool_call>",
       "<tool_call>{\"name\": \"now\"}</tool_call>", {}},
      {"llama_bare_json", F::kLlama3Json,
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}", "",
       {{"get_weather", "{\"city\": \"Paris\", \"days\": 3}"}}},
      {"llama_python_tag_two_calls", F::kLlama3Json,
       "<|python_tag|>{\"name\": \"lookup\", \"parameters\": {\"q\": \"café ☕\"}}; {\"name\": "
       "\"convert\", \"parameters\": {\"from\": \"EUR\", \"to\": \"USD\", \"amount\": 12.5}}",
       "",
       {{"lookup", "{\"q\": \"café ☕\"}"},
        {"convert", "{\"from\": \"EUR\", \"to\": \"USD\", \"amount\": 12.5}"}}},
      {"llama_text_before_tag", F::kLlama3Json,
       "Let me look that up.<|python_tag|>{\"name\": \"search\", \"arguments\": {\"query\": "
       "\"llama\"}}",
       "Let me look that up.", {{"search", "{\"query\": \"llama\"}"}}},
      {"llama_newline_separated_text_after", F::kLlama3Json,
       "\n\n{\"name\": \"a\", \"parameters\": {}}\n{\"name\": \"b\", \"parameters\": {\"x\": "
       "\"{not a call}\"}}\nThat's all.",
       "That's all.", {{"a", "{}"}, {"b", "{\"x\": \"{not a call}\"}"}}},
      {"llama_json_answer_is_content", F::kLlama3Json, "{\"name\": \"Ada Lovelace\", \"born\": 1815}",
       "{\"name\": \"Ada Lovelace\", \"born\": 1815}", {}},
      {"llama_json_after_prose_is_content", F::kLlama3Json,
       "Here it is: {\"name\": \"f\", \"parameters\": {}}",
       "Here it is: {\"name\": \"f\", \"parameters\": {}}", {}},
      {"llama_python_code_is_content", F::kLlama3Json,
       "<|python_tag|>brave_search.call(query=\"weather\")",
       "<|python_tag|>brave_search.call(query=\"weather\")", {}},
      {"mistral_array", F::kMistral,
       "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}, {\"name\": "
       "\"get_time\", \"arguments\": {\"tz\": \"Europe/Paris\"}}]",
       "",
       {{"get_weather", "{\"city\": \"Lyon\"}"}, {"get_time", "{\"tz\": \"Europe/Paris\"}"}}},
      {"mistral_named_form", F::kMistral,
       "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Montréal\"}[TOOL_CALLS]get_time[ARGS]{\"tz\": "
       "\"America/Toronto\"}",
       "", {{"get_weather", "{\"city\": \"Montréal\"}"}, {"get_time", "{\"tz\": \"America/Toronto\"}"}}},
      {"mistral_text_before_false_markers", F::kMistral,
       "Use [TOOL] or [TOOLS] tags. Sure.[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]",
       "Use [TOOL] or [TOOLS] tags. Sure.", {{"f", "{}"}}},
      {"mistral_prose_after_marker", F::kMistral, "[TOOL_CALLS] I cannot call tools here.",
       "[TOOL_CALLS] I cannot call tools here.", {}},
      {"mistral_second_element_malformed", F::kMistral,
       "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"nom\": \"b\"}]",
       "{\"nom\": \"b\"}]", {{"a", "{}"}}},
  };
  return fixtures;
}

}  // namespace flashserve::output_parsers::testing
