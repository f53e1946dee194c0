// Prompt formats for the chat client. By default (kServer) the server renders the conversation
// with the model's own chat template (POST /v1/chat/completions). The local templates are a
// fallback for servers without that endpoint: the conversation (system prompt, finished turns,
// the new user message) rendered here as one completion prompt, with the stop strings that end
// the assistant's reply in that format. Pure functions, no I/O.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace flashserve::chat {

enum class TemplateKind { kPlain, kLlama2, kChatml, kZephyr, kServer };

struct Turn {
  std::string user;
  std::string assistant;
};

// "server" | "plain" | "llama2" | "chatml" | "zephyr"; nullopt for anything else.
std::optional<TemplateKind> parse_template_kind(const std::string& name);
std::string template_name(TemplateKind kind);

// The prompt for the next reply: system (may be empty), finished turns oldest first, then the new
// user message, ending where the assistant's text begins. The server adds BOS itself, so no
// template starts with <s>. kServer renders as plain: the client only uses it to estimate the
// conversation's size.
std::string render_prompt(TemplateKind kind, const std::string& system,
                          const std::vector<Turn>& turns, const std::string& user);

// Text that ends the assistant's turn in this format (sent as the request's "stop"); none for
// kServer (the server's template and the model's EOS ids end the reply).
std::vector<std::string> stop_strings(TemplateKind kind);

}  // namespace flashserve::chat
