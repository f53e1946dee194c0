// Prompt formats: the server's own (kServer), and the local fallbacks: plain ("User:"/"Assistant:" lines), Llama-2 chat ([INST] with <<SYS>>),
// ChatML (<|im_start|>role ... <|im_end|>) and Zephyr (<|user|> ... </s>).
#include "chat_cli/chat_template.h"

namespace flashserve::chat {

std::optional<TemplateKind> parse_template_kind(const std::string& name) {
  if (name == "server") return TemplateKind::kServer;
  if (name == "plain") return TemplateKind::kPlain;
  if (name == "llama2" || name == "llama-2") return TemplateKind::kLlama2;
  if (name == "chatml") return TemplateKind::kChatml;
  if (name == "zephyr") return TemplateKind::kZephyr;
  return std::nullopt;
}

std::string template_name(TemplateKind kind) {
  switch (kind) {
    case TemplateKind::kPlain: return "plain";
    case TemplateKind::kLlama2: return "llama2";
    case TemplateKind::kChatml: return "chatml";
    case TemplateKind::kZephyr: return "zephyr";
    case TemplateKind::kServer: return "server";
  }
  return "plain";
}

namespace {

std::string render_plain(const std::string& system, const std::vector<Turn>& turns,
                         const std::string& user) {
  std::string out;
  if (!system.empty()) out += system + "\n\n";
  for (const Turn& t : turns) out += "User: " + t.user + "\nAssistant: " + t.assistant + "\n";
  return out + "User: " + user + "\nAssistant:";
}

// Llama-2 chat: the system block sits inside the first [INST]; each finished exchange is closed
// with </s> and the next opens with <s> (the very first <s> is the server's BOS).
std::string render_llama2(const std::string& system, const std::vector<Turn>& turns,
                          const std::string& user) {
  std::string out;
  auto inst = [&](const std::string& u, bool first) {
    std::string body = u;
    if (first && !system.empty()) body = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + u;
    return "[INST] " + body + " [/INST]";
  };
  bool first = true;
  for (const Turn& t : turns) {
    if (!first) out += "<s>";
    out += inst(t.user, first) + " " + t.assistant + " </s>";
    first = false;
  }
  if (!first) out += "<s>";
  return out + inst(user, first);
}

// ChatML and Zephyr: every message is one block, the role between `role_open` and `role_close`,
// then its text and `end`; the prompt ends by opening the assistant's block.
struct BlockFormat {
  const char* role_open;
  const char* role_close;
  const char* end;
};

std::string render_blocks(const BlockFormat& f, const std::string& system,
                          const std::vector<Turn>& turns, const std::string& user) {
  auto open = [&](const std::string& role) { return f.role_open + role + f.role_close; };
  auto block = [&](const std::string& role, const std::string& text) { return open(role) + text + f.end; };
  std::string out;
  if (!system.empty()) out += block("system", system);
  for (const Turn& t : turns) out += block("user", t.user) + block("assistant", t.assistant);
  return out + block("user", user) + open("assistant");
}

constexpr BlockFormat kChatml = {"<|im_start|>", "\n", "<|im_end|>\n"};
constexpr BlockFormat kZephyr = {"<|", "|>\n", "</s>\n"};

}  // namespace

std::string render_prompt(TemplateKind kind, const std::string& system,
                          const std::vector<Turn>& turns, const std::string& user) {
  switch (kind) {
    case TemplateKind::kPlain: return render_plain(system, turns, user);
    case TemplateKind::kLlama2: return render_llama2(system, turns, user);
    case TemplateKind::kChatml: return render_blocks(kChatml, system, turns, user);
    case TemplateKind::kZephyr: return render_blocks(kZephyr, system, turns, user);
    case TemplateKind::kServer: return render_plain(system, turns, user);  // size estimate only
  }
  return render_plain(system, turns, user);
}

std::vector<std::string> stop_strings(TemplateKind kind) {
  switch (kind) {
    case TemplateKind::kPlain: return {"\nUser:"};
    case TemplateKind::kLlama2: return {"</s>", "[INST]"};
    case TemplateKind::kChatml: return {"<|im_end|>", "<|im_start|>"};
    case TemplateKind::kZephyr: return {"</s>", "<|user|>"};
    case TemplateKind::kServer: return {};
  }
  return {};
}

}  // namespace flashserve::chat
