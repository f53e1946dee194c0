// The built-in chat templates (see builtin_templates.h). Each renders the prompt format of its
// model family; roles the format cannot express raise an error the API returns as a 400.
#include "chat_template/builtin_templates.h"

#include <utility>

namespace flashserve {
namespace {

// Llama 2 chat: an optional system prompt folded into the first user turn inside <<SYS>>, user
// turns in [INST] ... [/INST], each user turn opening with BOS and each answer closed by EOS.
const char* const kLlama2 = R"JINJA(
{%- if messages[0]['role'] == 'system' -%}
  {%- set system_text = messages[0]['content'] -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set system_text = none -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {%- set text = message['content'] -%}
    {%- if loop.first and system_text is not none -%}
      {%- set text = '<<SYS>>\n' + system_text + '\n<</SYS>>\n\n' + text -%}
    {%- endif -%}
    {{- bos_token + '[INST] ' + text | trim + ' [/INST]' -}}
  {%- elif message['role'] == 'assistant' -%}
    {{- ' ' + message['content'] | trim + ' ' + eos_token -}}
  {%- else -%}
    {{- raise_exception('Only a first system message, then user and assistant roles are supported') -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

// Llama 3 instruct: every message in header tokens, content trimmed, closed by <|eot_id|>.
const char* const kLlama3 = R"JINJA(
{{- bos_token -}}
{%- for message in messages -%}
  {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' -}}
  {{- message['content'] | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
)JINJA";

// ChatML (Qwen, SmolLM, many fine-tunes): <|im_start|>role\ncontent<|im_end|>\n.
const char* const kChatml = R"JINJA(
{%- for message in messages -%}
  {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
)JINJA";

// Mistral instruct (v0.1-v0.3 text format): BOS once, [INST] user [/INST] answer</s>; a system
// message goes in front of the first user turn.
const char* const kMistral = R"JINJA(
{{- bos_token -}}
{%- if messages[0]['role'] == 'system' -%}
  {%- set system_text = messages[0]['content'] -%}
  {%- set turns = messages[1:] -%}
{%- else -%}
  {%- set turns = messages -%}
{%- endif -%}
{%- for message in turns -%}
  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {%- if message['role'] == 'user' -%}
    {%- if loop.first and system_text is defined -%}
      {{- '[INST] ' + system_text + '\n\n' + message['content'] + ' [/INST]' -}}
    {%- else -%}
      {{- '[INST] ' + message['content'] + ' [/INST]' -}}
    {%- endif -%}
  {%- elif message['role'] == 'assistant' -%}
    {{- ' ' + message['content'] + eos_token -}}
  {%- else -%}
    {{- raise_exception('Only a first system message, then user and assistant roles are supported') -}}
  {%- endif -%}
{%- endfor -%}
)JINJA";

// Zephyr: <|role|>\ncontent</s>\n per message, written line by line (trim_blocks at work).
const char* const kZephyr = R"JINJA({% for message in messages %}
{% if message['role'] in ['system', 'user', 'assistant'] %}
{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token }}
{% else %}
{{ raise_exception('Only system, user and assistant roles are supported') }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}
)JINJA";

const std::pair<const char*, const char*> kBuiltins[] = {
    {"llama-2", kLlama2}, {"llama-3", kLlama3}, {"chatml", kChatml},
    {"mistral", kMistral}, {"zephyr", kZephyr},
};

}  // namespace

const char* builtin_template_source(const std::string& name) {
  for (const auto& [n, source] : kBuiltins) {
    if (name == n) return source;
  }
  return nullptr;
}

std::vector<std::string> builtin_template_names() {
  std::vector<std::string> names;
  for (const auto& [n, source] : kBuiltins) names.push_back(n);
  return names;
}

}  // namespace flashserve
