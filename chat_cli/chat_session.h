// ChatSession: the conversation state of flashserve-chat (history, system prompt, sampling
// settings), fitting the history into the model's context, and the slash commands. Pure: no
// I/O; main.cpp prints what the functions return.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat_cli/chat_template.h"

namespace flashserve::chat {

struct SessionOptions {
  TemplateKind kind = TemplateKind::kServer;
  std::string system;
  double temperature = 0.8;
  int max_tokens = 256;
  int max_model_len = 0;  // from /v1/models; 0 = unknown (only the server's 400 trims then)
};

// What to send for the next reply.
struct PreparedPrompt {
  std::string prompt;        // local templates: the prompt; kServer: its plain form (for the estimate)
  nlohmann::json messages;   // kServer: the conversation as OpenAI chat messages
  int estimated_tokens = 0;  // of the prompt, by the current bytes-per-token estimate
  int dropped_turns = 0;     // oldest turns removed from the history to fit
  bool fits = true;          // false: even with no history left the estimate exceeds the budget
};

enum class CommandAction { kNone, kHandled, kQuit };

struct CommandResult {
  CommandAction action = CommandAction::kNone;  // kNone: not a command, send the line as a message
  std::string message;                          // text to show the user (may be empty)
  bool error = false;                           // the message is an error (bad command / value)
};

class ChatSession {
 public:
  explicit ChatSession(SessionOptions options);

  const SessionOptions& options() const { return options_; }
  const std::vector<Turn>& history() const { return history_; }

  // Tokens the prompt may use: max_model_len - max_tokens (0 when max_model_len is unknown).
  int prompt_budget() const;
  // Conservative token count for `text`: bytes / bytes_per_token, rounded up, plus 1 for BOS.
  int estimate_tokens(const std::string& text) const;
  double bytes_per_token() const { return bytes_per_token_; }

  // Renders the prompt for `user`, dropping the oldest turns (permanently) until the estimate
  // fits the budget.
  PreparedPrompt prepare(const std::string& user);
  // The system prompt, the history and `user` as chat messages (what kServer sends).
  nlohmann::json messages(const std::string& user) const;
  // Drops the oldest turn (after the server said the prompt is too long); false if none is left.
  bool drop_oldest();
  // Records a finished (or interrupted) exchange.
  void commit(const std::string& user, const std::string& assistant);
  // Calibrates the estimate from the server's usage: the prompt of `prompt_bytes` bytes was
  // `prompt_tokens` tokens. Keeps a 15% margin and stays within [1, 4] bytes per token.
  void observe_usage(size_t prompt_bytes, int prompt_tokens);

  // Handles a line starting with '/': /reset, /system [TEXT], /temp X, /max N, /help, /quit.
  CommandResult handle_command(const std::string& line);

  static std::string help_text();

 private:
  SessionOptions options_;
  std::vector<Turn> history_;
  // Start: 2 bytes per token (Llama's 32k vocabulary averages ~4 on English; tok512 ~1.9, which
  // the first reply's usage corrects, and the server's 400 catches in between).
  double bytes_per_token_ = 2.0;
};

}  // namespace flashserve::chat
