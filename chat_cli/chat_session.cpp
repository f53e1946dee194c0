// ChatSession: history trimming by a calibrated bytes-per-token estimate, and slash commands.
#include "chat_cli/chat_session.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace flashserve::chat {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool parse_int(const std::string& s, long* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (*end != '\0') return false;
  *out = v;
  return true;
}

std::string format_number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

ChatSession::ChatSession(SessionOptions options) : options_(std::move(options)) {}

int ChatSession::prompt_budget() const {
  if (options_.max_model_len <= 0) return 0;
  return std::max(0, options_.max_model_len - options_.max_tokens);
}

int ChatSession::estimate_tokens(const std::string& text) const {
  return static_cast<int>(std::ceil(static_cast<double>(text.size()) / bytes_per_token_)) + 1;
}

PreparedPrompt ChatSession::prepare(const std::string& user) {
  PreparedPrompt p;
  const int budget = prompt_budget();
  for (;;) {
    p.prompt = render_prompt(options_.kind, options_.system, history_, user);
    if (options_.kind == TemplateKind::kServer) p.messages = messages(user);
    p.estimated_tokens = estimate_tokens(p.prompt);
    if (budget <= 0 && options_.max_model_len <= 0) return p;  // unknown context: send as is
    if (p.estimated_tokens <= budget) return p;
    if (!drop_oldest()) {
      p.fits = false;
      return p;
    }
    ++p.dropped_turns;
  }
}

nlohmann::json ChatSession::messages(const std::string& user) const {
  nlohmann::json m = nlohmann::json::array();
  if (!options_.system.empty()) m.push_back({{"role", "system"}, {"content", options_.system}});
  for (const Turn& t : history_) {
    m.push_back({{"role", "user"}, {"content", t.user}});
    m.push_back({{"role", "assistant"}, {"content", t.assistant}});
  }
  m.push_back({{"role", "user"}, {"content", user}});
  return m;
}

bool ChatSession::drop_oldest() {
  if (history_.empty()) return false;
  history_.erase(history_.begin());
  return true;
}

void ChatSession::commit(const std::string& user, const std::string& assistant) {
  history_.push_back({user, assistant});
}

void ChatSession::observe_usage(size_t prompt_bytes, int prompt_tokens) {
  if (prompt_tokens <= 1 || prompt_bytes == 0) return;
  // prompt_tokens includes BOS; the text itself is prompt_tokens - 1 tokens.
  double observed = static_cast<double>(prompt_bytes) / (prompt_tokens - 1);
  bytes_per_token_ = std::clamp(observed * 0.85, 1.0, 4.0);
}

std::string ChatSession::help_text() {
  return "Commands:\n"
         "  /reset        forget the conversation (the system prompt stays)\n"
         "  /system TEXT  set the system prompt (no TEXT: clear it); also resets the history\n"
         "  /temp X       sampling temperature, 0 (greedy) to 2\n"
         "  /max N        the most tokens per reply\n"
         "  /help         this text\n"
         "  /quit         leave (also /exit or Ctrl-D)\n"
         "Ctrl-C stops the reply being written and returns to the prompt.";
}

CommandResult ChatSession::handle_command(const std::string& line_in) {
  const std::string line = trim(line_in);
  CommandResult r;
  if (line.empty() || line[0] != '/') return r;  // a message, not a command
  size_t sp = line.find_first_of(" \t");
  const std::string cmd = line.substr(0, sp);
  const std::string arg = sp == std::string::npos ? "" : trim(line.substr(sp));
  r.action = CommandAction::kHandled;
  auto fail = [&](const std::string& msg) {
    r.message = msg;
    r.error = true;
    return r;
  };
  if (cmd == "/quit" || cmd == "/exit") {
    r.action = CommandAction::kQuit;
  } else if (cmd == "/help") {
    r.message = help_text();
  } else if (cmd == "/reset") {
    history_.clear();
    r.message = "[conversation reset]";
  } else if (cmd == "/system") {
    options_.system = arg;
    history_.clear();
    r.message = arg.empty() ? "[system prompt cleared; conversation reset]"
                            : "[system prompt set; conversation reset]";
  } else if (cmd == "/temp") {
    double t = 0;
    if (!parse_double(arg, &t) || t < 0 || t > 2) return fail("usage: /temp X with 0 <= X <= 2");
    options_.temperature = t;
    r.message = "[temperature " + format_number(t) + "]";
  } else if (cmd == "/max") {
    long n = 0;
    if (!parse_int(arg, &n) || n < 1) return fail("usage: /max N with N >= 1");
    if (options_.max_model_len > 0 && n >= options_.max_model_len) {
      return fail("/max must be below the model's context of " +
                  std::to_string(options_.max_model_len) + " tokens");
    }
    options_.max_tokens = static_cast<int>(n);
    r.message = "[max tokens " + std::to_string(n) + "]";
  } else {
    return fail("unknown command " + cmd + " (try /help)");
  }
  return r;
}

}  // namespace flashserve::chat
