// ChatTemplate: finds a model's chat template (tokenizer_config.json, chat_template.jinja, a
// built-in name or a file), parses it once, and renders conversations with the variables
// transformers' apply_chat_template passes (messages, add_generation_prompt, bos_token,
// eos_token, tools (None or the request's), documents=None, raise_exception, strftime_now), plus
// the request's chat_template_kwargs.
#include "chat_template/chat_template.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "chat_template/builtin_templates.h"
#include "chat_template/jinja_eval.h"
#include "chat_template/jinja_lexer.h"
#include "chat_template/jinja_parser.h"

namespace flashserve {

struct ChatTemplate::Impl {
  std::string source;
  std::string origin;
  std::string bos_token;
  std::string eos_token;
  jinja::Body body;
};

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat(path, ": cannot read the chat template file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// bos_token / eos_token: a string, {"content": "..."} (AddedToken), or null/absent.
std::string special_token(const nlohmann::json& config, const char* key, const std::string& fallback,
                          const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  throw Error(str_cat(path, ": \"", key, "\" must be a string or {\"content\": string}"));
}

// "chat_template": a string, or a list of {"name", "template"} of which "default" is used.
std::string template_from_config(const nlohmann::json& value, const std::string& path) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) throw Error(str_cat(path, ": \"chat_template\" must be a string or a list"));
  std::string names;
  for (const auto& entry : value) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !entry.contains("template") || !entry["template"].is_string()) {
      throw Error(str_cat(path, ": each \"chat_template\" entry needs string \"name\" and \"template\""));
    }
    if (entry["name"] == "default") return entry["template"].get<std::string>();
    names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
  }
  throw Error(str_cat(path, ": \"chat_template\" has no template named \"default\" (it has: ",
                      names, ")"));
}

// A client's JSON (tools, call arguments) as the Python objects json.loads gives the template.
// Its strings are the client's text, so they are literal: special-token text in them stays text.
jinja::Value json_value(const nlohmann::ordered_json& j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(jinja::Text::all_literal(j.get<std::string>()));
    case nlohmann::ordered_json::value_t::array: {
      jinja::List list;
      for (const auto& x : j) list.push_back(json_value(x));
      return Value::list(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Dict d;
      for (const auto& [k, v] : j.items()) {
        d.set(Value::string(jinja::Text::all_literal(k)), json_value(v));
      }
      return Value::dict(std::move(d));
    }
    default: return Value::none();
  }
}

jinja::Value tool_call_value(const ChatToolCall& c) {
  using jinja::Value;
  auto args = nlohmann::ordered_json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
  jinja::Dict function;
  function.set(Value::string("name"), Value::string(jinja::Text::all_literal(c.name)));
  function.set(Value::string("arguments"),
               args.is_discarded() ? Value::string(jinja::Text::all_literal(c.arguments))
                                   : json_value(args));
  jinja::Dict d;
  d.set(Value::string("id"), Value::string(jinja::Text::all_literal(c.id)));
  d.set(Value::string("type"), Value::string("function"));
  d.set(Value::string("function"), Value::dict(std::move(function)));
  return Value::dict(std::move(d));
}

jinja::Value message_value(const ChatMessage& m) {
  using jinja::Value;
  jinja::Dict d;
  d.set(Value::string("role"), Value::string(m.role));
  d.set(Value::string("content"),
        m.null_content ? Value::none() : Value::string(jinja::Text::all_literal(m.content)));
  if (!m.name.empty()) {
    d.set(Value::string("name"), Value::string(jinja::Text::all_literal(m.name)));
  }
  if (!m.tool_call_id.empty()) {
    d.set(Value::string("tool_call_id"), Value::string(jinja::Text::all_literal(m.tool_call_id)));
  }
  if (!m.reasoning_content.empty()) {
    for (const char* key : {"reasoning_content", "thinking"}) {
      d.set(Value::string(key), Value::string(jinja::Text::all_literal(m.reasoning_content)));
    }
  }
  if (!m.tool_calls.empty()) {
    jinja::List calls;
    for (const ChatToolCall& c : m.tool_calls) calls.push_back(tool_call_value(c));
    d.set(Value::string("tool_calls"), Value::list(std::move(calls)));
  }
  return Value::dict(std::move(d));
}

jinja::Value raise_exception() {
  return jinja::Value::callable("raise_exception", [](jinja::CallArgs& a) -> jinja::Value {
    throw ChatTemplateError(a.positional.empty() ? "" : jinja::to_text(a.positional[0]).s);
  });
}

// transformers' strftime_now(format): the local time, formatted like Python's strftime.
jinja::Value strftime_now() {
  return jinja::Value::callable("strftime_now", [](jinja::CallArgs& a) -> jinja::Value {
    if (a.positional.empty() || !a.positional[0].is(jinja::Value::Type::String)) {
      throw jinja::RenderError("strftime_now takes a format string");
    }
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof buf, a.positional[0].str().c_str(), &local);
    return jinja::Value::string(std::string(buf, n));
  });
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string origin, std::string bos_token,
                           std::string eos_token)
    : impl_(std::make_unique<Impl>()) {
  impl_->source = source;
  impl_->origin = std::move(origin);
  impl_->bos_token = std::move(bos_token);
  impl_->eos_token = std::move(eos_token);
  impl_->body = jinja::parse(jinja::lex(source, impl_->origin), impl_->origin);
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::optional<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir,
                                                         const std::string& fallback_bos,
                                                         const std::string& fallback_eos) {
  namespace fs = std::filesystem;
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  std::string bos = fallback_bos, eos = fallback_eos;
  nlohmann::json config;
  if (fs::exists(config_path)) {
    try {
      config = nlohmann::json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(str_cat(config_path, ": not valid JSON: ", e.what()));
    }
    if (!config.is_object()) throw Error(str_cat(config_path, ": not a JSON object"));
    bos = special_token(config, "bos_token", fallback_bos, config_path);
    eos = special_token(config, "eos_token", fallback_eos, config_path);
  }
  // transformers lets chat_template.jinja override the config's template (its tokenizer test
  // test_chat_template_file_priority).
  if (fs::exists(jinja_path)) return ChatTemplate(read_file(jinja_path), jinja_path, bos, eos);
  if (config.is_object()) {
    auto it = config.find("chat_template");
    if (it != config.end() && !it->is_null()) {
      return ChatTemplate(template_from_config(*it, config_path), config_path, bos, eos);
    }
  }
  return std::nullopt;
}

ChatTemplate ChatTemplate::from_flag(const std::string& file_or_name, const std::string& bos_token,
                                     const std::string& eos_token) {
  if (const char* source = builtin_template_source(file_or_name)) {
    return ChatTemplate(source, "builtin:" + file_or_name, bos_token, eos_token);
  }
  if (!std::filesystem::is_regular_file(file_or_name)) {
    std::string names;
    for (const auto& n : builtin_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error(str_cat("--chat-template: '", file_or_name,
                        "' is neither a built-in template (", names, ") nor a file"));
  }
  return ChatTemplate(read_file(file_or_name), file_or_name, bos_token, eos_token);
}

std::vector<std::string> ChatTemplate::builtin_names() { return builtin_template_names(); }

const std::vector<std::string>& ChatTemplate::reserved_variables() {
  static const std::vector<std::string> k = {"messages", "add_generation_prompt", "bos_token",
                                             "eos_token", "tools", "documents",
                                             "raise_exception", "strftime_now"};
  return k;
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt, std::string_view tools_json,
                                  std::string_view kwargs_json) const {
  jinja::List list;
  for (const ChatMessage& m : messages) list.push_back(message_value(m));
  jinja::Variables vars = {
      {"messages", jinja::Value::list(std::move(list))},
      {"add_generation_prompt", jinja::Value::boolean(add_generation_prompt)},
      {"bos_token", jinja::Value::string(impl_->bos_token)},
      {"eos_token", jinja::Value::string(impl_->eos_token)},
      {"tools", tools_json.empty() ? jinja::Value::none()
                                   : json_value(nlohmann::ordered_json::parse(tools_json))},
      {"documents", jinja::Value::none()},
      {"raise_exception", raise_exception()},
      {"strftime_now", strftime_now()},
  };
  if (!kwargs_json.empty()) {
    const auto& reserved = reserved_variables();
    const auto kwargs = nlohmann::ordered_json::parse(kwargs_json);  // outlives the loop
    for (const auto& [k, v] : kwargs.items()) {
      if (std::find(reserved.begin(), reserved.end(), k) == reserved.end()) {
        vars.emplace_back(k, json_value(v));
      }
    }
  }
  try {
    jinja::Text text = jinja::render(impl_->body, vars);
    return RenderedChat{std::move(text.s), std::move(text.literal)};
  } catch (const jinja::RenderError& e) {
    throw ChatTemplateError(str_cat(impl_->origin, ": ", e.what()));
  }
}

bool ChatTemplate::uses_tools() const {
  return impl_->source.find("tools") != std::string::npos;
}
const std::string& ChatTemplate::source() const { return impl_->source; }
const std::string& ChatTemplate::origin() const { return impl_->origin; }
const std::string& ChatTemplate::bos_token() const { return impl_->bos_token; }
const std::string& ChatTemplate::eos_token() const { return impl_->eos_token; }

}  // namespace flashserve
