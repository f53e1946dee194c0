// POST /v1/chat/completions request parsing (docs/SERVER.md): the messages are validated, rendered
// with the model's chat template and encoded so that only the template's own special-token text
// becomes special ids. The result is the same CompletionRequest /v1/completions produces (one
// prompt, format kChat), so both endpoints share the whole pipeline after this point. Tools and
// response_format become the request's constraint (tools_request.h, response_format.h);
// chat_template_kwargs and reasoning_effort become extra template variables.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "engine/stop_rules.h"
#include "output_parsers/reasoning_parser.h"
#include "server/endpoints/chat_request.h"
#include "server/api/request_fields.h"
#include "server/api/response_format.h"
#include "server/tool_calls/tool_call_constraint.h"
#include "server/tool_calls/tools_prompt.h"
#include "server/tool_calls/tools_request.h"
#include "tokenizer/special_split.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

using json = nlohmann::json;

namespace {

// OpenAI fields that this server cannot honour: each with the values that change nothing
// (accepted, as null is) and why any other value is a 400 that says so (not "unknown").
struct NoOpField {
  bool (*changes_nothing)(const json& v);
  const char* why;
};

const std::map<std::string, NoOpField>& unsupported_fields() {
  static const std::map<std::string, NoOpField> k = {
      {"functions", {[](const json& v) { return v.is_array() && v.empty(); },
                     "use tools and tool_choice"}},
      {"function_call", {[](const json& v) { return v == "none"; }, "use tools and tool_choice"}},
      {"audio", {[](const json&) { return false; }, "no audio"}},
      {"modalities", {[](const json& v) { return v == json::array({"text"}); }, "text only"}},
      {"web_search_options", {[](const json&) { return false; }, "no web search"}},
      {"verbosity", {[](const json& v) { return v == "medium"; },
                     "the model's length is its own; use max_completion_tokens"}}};
  return k;
}

void reject_unsupported(const json& j) {
  for (const auto& [key, value] : j.items()) {
    auto found = unsupported_fields().find(key);
    if (found != unsupported_fields().end() && !value.is_null() &&
        !found->second.changes_nothing(value)) {
      throw bad_request("'" + key + "' is not supported by this server (" + found->second.why +
                            ")",
                        key, "unsupported_parameter");
    }
  }
}

// The fields chat reads, and the no-op ones above (refused by reject_unsupported otherwise).
const std::set<std::string>& chat_fields() {
  static const std::set<std::string> k = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
      "min_p", "n", "stop", "stream", "stream_options", "seed", "presence_penalty",
      "frequency_penalty", "repetition_penalty", "logit_bias", "logprobs", "top_logprobs", "user",
      "ignore_eos", "response_format", "cache_salt", "speculative", "tools", "tool_choice",
      "parallel_tool_calls", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
      "chat_template_kwargs", "reasoning_effort"};
  static const std::set<std::string> with_no_ops = [] {
    std::set<std::string> s = k;
    for (const auto& [key, field] : unsupported_fields()) s.insert(key);
    return s;
  }();
  return with_no_ops;
}

// A message's content: a string, or a list of {"type":"text","text":...} parts joined.
std::string message_content(const json& m, const std::string& where, const std::string& role) {
  if (!m.contains("content") || m["content"].is_null()) {
    if (role == "assistant") return "";  // an assistant turn may have no text (only calls)
    throw bad_request("'" + where + ".content' is required", where + ".content");
  }
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) {
    throw bad_request("'" + where + ".content' must be a string or a list of content parts",
                      where + ".content");
  }
  std::string text;
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string part = where + ".content[" + std::to_string(k) + "]";
    const json& p = c[k];
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) {
      throw bad_request("'" + part + "' must be an object with a 'type'", part);
    }
    const std::string type = p["type"].get<std::string>();
    if (type != "text") {
      throw bad_request("'" + part + "' has type '" + type +
                            "': only text parts are supported (no images, audio or files)",
                        part, "unsupported_content_type");
    }
    if (!p.contains("text") || !p["text"].is_string()) {
      throw bad_request("'" + part + ".text' must be a string", part + ".text");
    }
    for (const auto& [key, value] : p.items()) {
      if (key != "type" && key != "text") {
        throw bad_request("unknown field '" + part + "." + key + "'", part + "." + key,
                          "unknown_parameter");
      }
    }
    text += p["text"].get<std::string>();
  }
  return text;
}

std::vector<ChatMessage> parse_messages(const json& j, bool harmony) {
  if (!request::has(j, "messages")) throw bad_request("'messages' is required", "messages");
  const json& ms = j["messages"];
  if (!ms.is_array()) throw bad_request("'messages' must be a list of messages", "messages");
  if (ms.empty()) throw bad_request("'messages' must not be empty", "messages");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const json& m = ms[i];
    if (!m.is_object()) throw bad_request("'" + where + "' must be an object", where);
    if (!m.contains("role") || !m["role"].is_string()) {
      throw bad_request("'" + where + ".role' is required (a string)", where + ".role");
    }
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (msg.role == "developer") msg.role = "system";
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      throw bad_request("'" + where + ".role' is '" + msg.role +
                            "': roles are system, developer, user, assistant and tool",
                        where + ".role");
    }
    // An assistant turn's reasoning, as this server returns it (reasoning_content) or as newer
    // clients name it (reasoning); the template decides whether the model sees it again.
    const bool assistant = msg.role == "assistant";
    for (const auto& [key, value] : m.items()) {
      const bool reasoning_key = key == "reasoning_content" || key == "reasoning";
      if (assistant && reasoning_key && !value.is_null()) {
        if (!value.is_string()) {
          throw bad_request("'" + where + "." + key + "' must be a string", where + "." + key);
        }
        msg.reasoning_content = value.get<std::string>();
        continue;
      }
      if (key != "role" && key != "content" && key != "name" && key != "tool_calls" &&
          key != "tool_call_id" && !value.is_null()) {
        throw bad_request("'" + where + "." + key + "' is not supported", where + "." + key,
                          key == "function_call" ? "unsupported_parameter" : "unknown_parameter");
      }
    }
    if (request::has(m, "name")) {
      if (!m["name"].is_string()) throw bad_request("'" + where + ".name' must be a string", where + ".name");
      msg.name = m["name"].get<std::string>();
    }
    msg.content = message_content(m, where, msg.role);
    // An assistant turn of calls alone: the template sees content None, as transformers passes it.
    // gpt-oss's template tests `"..." in message.content`, which None fails: it gets "".
    msg.null_content = msg.role == "assistant" && !request::has(m, "content") &&
                       request::has(m, "tool_calls") && !harmony;
    request::read_message_tool_fields(m, where, &msg);
    out.push_back(std::move(msg));
  }
  return out;
}

// The three levels gpt-oss knows: the levels below low are low, those above high are high.
std::string harmony_effort(const std::string& effort) {
  if (effort == "none" || effort == "minimal") return "low";
  if (effort == "xhigh" || effort == "max") return "high";
  return effort;
}

// chat_template_kwargs and reasoning_effort as the template's extra variables (a JSON object
// text, "" for none). The renderer's own variables cannot be overridden: naming one is a 400.
// reasoning_effort drives a template's enable_thinking switch (none/minimal: off, else on) and
// gpt-oss's reasoning_effort variable, unless the kwargs set them; other templates ignore it.
std::string template_kwargs(const json& j, const ServedModel& model) {
  json kw = json::object();
  if (request::has(j, "chat_template_kwargs")) {
    kw = j["chat_template_kwargs"];
    if (!kw.is_object()) {
      throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    }
    for (const std::string& name : ChatTemplate::reserved_variables()) {
      if (kw.contains(name)) {
        throw bad_request("'chat_template_kwargs." + name + "' cannot be set: the server "
                          "passes '" + name + "' to the template itself",
                          "chat_template_kwargs." + name);
      }
    }
  }
  if (request::has(j, "reasoning_effort")) {
    // xhigh and max (newer clients' levels) are the highest level a template knows: high.
    static const std::set<std::string> efforts = {"none", "minimal", "low", "medium",
                                                  "high", "xhigh", "max"};
    const json& e = j["reasoning_effort"];
    if (!e.is_string() || !efforts.count(e.get<std::string>())) {
      throw bad_request("'reasoning_effort' must be one of none, minimal, low, medium, high, "
                        "xhigh, max",
                        "reasoning_effort");
    }
    const std::string source = model.chat_template ? model.chat_template->source() : "";
    const bool has_switch = source.find("enable_thinking") != std::string::npos;
    if (has_switch && !kw.contains("enable_thinking")) {
      kw["enable_thinking"] = e != "none" && e != "minimal";
    }
    // gpt-oss's template writes "Reasoning: low|medium|high" into its system message.
    if (source.find("reasoning_effort") != std::string::npos && !kw.contains("reasoning_effort")) {
      kw["reasoning_effort"] = harmony_effort(e.get<std::string>());
    }
  }
  return kw.empty() ? "" : kw.dump();
}

// The messages as prompt token ids: rendered by the template, special ids only where it wrote
// them, then `prefill` (template text: a forced harmony call's header). *opens_reasoning:
// whether the rendered prompt leaves the model inside <think>.
std::vector<int32_t> chat_prompt(std::vector<ChatMessage> messages,
                                 const request::ToolsRequest& tools, const std::string& kwargs,
                                 const std::string& prefill, const ServedModel& model,
                                 const Tokenizer& tokenizer, bool* opens_reasoning) {
  if (!model.chat_template) {
    std::string names;
    for (const auto& n : ChatTemplate::builtin_names()) names += (names.empty() ? "" : ", ") + n;
    throw bad_request("This model has no chat template (none in its folder's tokenizer_config.json "
                      "or chat_template.jinja), so /v1/chat/completions cannot build a prompt. "
                      "Start flashserve with --chat-template NAME (built-in: " + names +
                          ") or --chat-template FILE (a Jinja template), or send your own prompt "
                          "to /v1/completions.",
                      "messages", "chat_template_missing");
  }
  // tool_choice "none": the model is not told of the tools at all.
  const bool show_tools = tools.any() && tools.choice != request::ToolsRequest::Choice::kNone;
  const bool template_tools = model.chat_template->uses_tools();
  if (!template_tools) {
    messages = describe_tools_in_messages(std::move(messages),
                                          show_tools ? tools.tools : nlohmann::ordered_json::array());
  }
  std::string tools_json;
  if (show_tools && template_tools) {
    nlohmann::ordered_json list = tools.tools;
    // gpt-oss's template writes "// " + description for every function and fails on one
    // without one: it gets an empty one.
    if (model.tool_calls.format == output_parsers::ToolCallFormat::kHarmony) {
      for (auto& t : list) {
        auto& f = t["function"];
        if (!f.contains("description") || f["description"].is_null()) f["description"] = "";
      }
    }
    tools_json = list.dump();
  }
  RenderedChat rendered;
  try {
    rendered = model.chat_template->render(messages, /*add_generation_prompt=*/true, tools_json,
                                           kwargs);
  } catch (const ChatTemplateError& e) {
    throw bad_request(std::string("the chat template rejected these messages: ") + e.what(),
                      "messages", "chat_template_error");
  }
  rendered.text += prefill;
  request::check_prompt_bytes(rendered.text.size(), "the rendered conversation", "messages",
                              model, tokenizer);
  std::vector<int32_t> ids;
  try {
    ids = encode_with_special_tokens(tokenizer, rendered.text, rendered.literal);
  } catch (const Error&) {
    throw bad_request("'messages' could not be tokenized (invalid UTF-8?)", "messages");
  }
  if (ids.empty()) throw bad_request("the chat template rendered an empty prompt", "messages");
  *opens_reasoning = output_parsers::prompt_opens_reasoning(rendered.text);
  return ids;
}

CompletionRequest parse_chat(std::string_view body, const ServedModel& model,
                        const Tokenizer& tokenizer) {
  const json j = request::parse_object(body);
  reject_unsupported(j);
  CompletionRequest r = request::read_shared_fields(j, model, chat_fields());
  r.format = ResponseFormat::kChat;
  auto has = [&](const char* k) { return request::has(j, k); };
  // max_completion_tokens is the current name, max_tokens the deprecated one; with neither the
  // reply may use the rest of the context (as OpenAI and vLLM do).
  std::optional<int64_t> max_tokens;
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (has(key)) max_tokens = request::get_max_tokens(j[key], key);
  }
  bool logprobs = false;
  if (has("logprobs")) logprobs = request::get_bool(j["logprobs"], "logprobs");
  if (has("top_logprobs")) {
    if (!logprobs) {
      throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
    r.logprobs = static_cast<int>(
        request::get_int(j["top_logprobs"], "top_logprobs", 0, kMaxTopLogprobs));
  } else if (logprobs) {
    r.logprobs = 0;
  }
  r.sampling.logprobs = r.logprobs;

  r.constraint = request::read_output_format(j, body, model);
  const request::ToolsRequest tools = request::read_tools(j, body, model);
  const bool use_tools = tools.any() && tools.choice != request::ToolsRequest::Choice::kNone;
  if (use_tools && r.constraint) {
    throw bad_request("'response_format' (or guided_*) cannot be combined with 'tools' unless "
                      "tool_choice is 'none'", "response_format");
  }
  const std::string kwargs = template_kwargs(j, model);
  const bool harmony = model.tool_calls.format == output_parsers::ToolCallFormat::kHarmony;
  std::vector<ChatMessage> messages = parse_messages(j, harmony);
  // Harmony: every chat output is split by channel, with or without tools.
  r.harmony = harmony;
  if (r.harmony && use_tools) r.harmony_prefill = request::harmony_forced_header(tools);
  // A response_format constrains the answer: the prompt opens the final channel for it.
  if (r.harmony && r.constraint && !use_tools) r.harmony_prefill = "<|channel|>final<|message|>";
  bool opens_reasoning = false;
  r.prompts.push_back(chat_prompt(std::move(messages), tools, kwargs, r.harmony_prefill, model,
                                  tokenizer, &opens_reasoning));
  r.reasoning = model.reasoning && !r.harmony;
  r.starts_in_reasoning = r.reasoning && opens_reasoning;
  if (r.harmony) r.marker_ids = model.tool_calls.silent_ids;
  if (use_tools) {  // the call grammar is built once everything else is known to be valid
    r.constraint = request::tool_call_constraint(tools, model);
    r.parallel_tool_calls = tools.parallel;
    if (r.harmony) {
      for (const auto& t : tools.tools) {
        r.harmony_functions.push_back(t["function"]["name"].get<std::string>());
      }
    } else {
      r.tool_call_format = model.tool_calls.format;
      r.marker_ids = model.tool_calls.silent_ids;
    }
  }
  r.echo_texts.push_back("");  // chat has no echo
  if (!max_tokens) {  // the rest of the context, and of the KV cache; at least 1
    int room = model.max_model_len;
    if (model.kv_cache_tokens > 0) room = int(std::min<int64_t>(room, model.kv_cache_tokens));
    const int prompt_len = static_cast<int>(r.prompts[0].size());
    max_tokens = std::max(1, generation_budget(prompt_len, std::numeric_limits<int>::max(), room));
  }
  request::set_max_tokens(&r, *max_tokens, model, "messages");
  return r;
}

}  // namespace

bool reasoning_parser_enabled(std::string_view flag, const ChatTemplate* chat_template) {
  if (flag == "none") return false;
  if (flag == "deepseek_r1" || flag == "qwen3") return true;
  if (flag == "auto" || flag.empty()) {
    return chat_template && output_parsers::template_has_reasoning(chat_template->source());
  }
  FS_THROW("--reasoning-parser: '", flag, "' is not one of auto, deepseek_r1, qwen3, none");
}

std::variant<CompletionRequest, ApiError> parse_chat_request(std::string_view body,
                                                             const ServedModel& model,
                                                             const Tokenizer& tokenizer) {
  return request::parse_or_error([&] { return parse_chat(body, model, tokenizer); });
}

}  // namespace flashserve
