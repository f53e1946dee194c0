// chat_template/: renders a conversation into the model's prompt text with the model's own Jinja chat
// template (the one the model's authors published in tokenizer_config.json or
// chat_template.jinja), or a built-in one chosen by name.
//
// The renderer tracks which bytes of the output came from message contents ("literal" ranges):
// the tokenizer never turns special-token text inside them into special ids, so a user who
// types "<|im_end|>" gets those characters, not the token (tokenizer/special_split.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace flashserve {

// A call an assistant turn made: the template sees {"id", "type": "function", "function":
// {"name", "arguments"}} with the arguments as a dict (parsed from their JSON text), as the
// templates of tool-calling models expect.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object (the API edge has checked it)
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool" ("developer" arrives as "system")
  std::string content;  // text parts already joined by the API edge
  std::string name;     // optional; "" = absent (the template sees it undefined)
  bool null_content = false;         // the template sees content None (an assistant turn of calls)
  std::string tool_call_id;          // role "tool": the call it answers ("" = absent)
  std::vector<ChatToolCall> tool_calls;  // role "assistant"; empty = absent
  // Role "assistant": the reasoning that came with the turn ("" = absent). The template sees it
  // as reasoning_content (Qwen 3's name) and thinking (gpt-oss's), and keeps or drops it.
  std::string reasoning_content;
};

struct RenderedChat {
  std::string text;
  // [begin, end) byte ranges of `text` copied from message contents; sorted, disjoint.
  std::vector<std::pair<size_t, size_t>> literal;
};

// An error the template raised while rendering a conversation (raise_exception(msg), e.g. a
// role order it rejects): the API edge answers it with a 400 carrying the message.
class ChatTemplateError : public Error {
 public:
  using Error::Error;
};

class ChatTemplate {
 public:
  // Parses `source` once. Anything malformed or outside the supported Jinja subset throws
  // flashserve::Error naming `origin` and the template line, so it fails at start-up.
  ChatTemplate(const std::string& source, std::string origin, std::string bos_token,
               std::string eos_token);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The model's template as transformers finds it: chat_template.jinja in the folder (it wins,
  // as in transformers), else tokenizer_config.json "chat_template" (a string, or a list of
  // {"name","template"}: the one named "default"); bos_token/eos_token from
  // tokenizer_config.json (a string or {"content": ...}), else the fallbacks. nullopt when the
  // folder has no template.
  static std::optional<ChatTemplate> from_model_dir(const std::string& dir,
                                                    const std::string& fallback_bos,
                                                    const std::string& fallback_eos);
  // --chat-template: a built-in name (builtin_names()) or a file holding a Jinja template.
  static ChatTemplate from_flag(const std::string& file_or_name, const std::string& bos_token,
                                const std::string& eos_token);
  static std::vector<std::string> builtin_names();

  // Throws ChatTemplateError for what the template raises or cannot evaluate for this
  // conversation; never returns a partial prompt.
  // `tools_json`: the request's tools as a JSON array text ([{"type": "function", "function":
  // {...}}], key order kept), which the template sees as `tools`; "" = None.
  // `kwargs_json`: a JSON object text whose keys become extra template variables
  // (chat_template_kwargs, e.g. {"enable_thinking": false}); "" = none. A key that names one of
  // reserved_variables() is skipped: the renderer's own variables always win.
  RenderedChat render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                      std::string_view tools_json = "", std::string_view kwargs_json = "") const;
  // The variables the renderer itself sets (messages, tools, bos_token...).
  static const std::vector<std::string>& reserved_variables();
  // Whether the template reads `tools` at all (otherwise the API edge describes the tools in a
  // system message of its own: docs/TOOL_CALLING.md).
  bool uses_tools() const;
  const std::string& source() const;  // the template's text

  const std::string& origin() const;  // "…/tokenizer_config.json", a file path, or "builtin:chatml"
  const std::string& bos_token() const;
  const std::string& eos_token() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flashserve
