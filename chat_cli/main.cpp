// flashserve-chat: a terminal chat client for a running flashserve (or any OpenAI-compatible
// server: /v1/chat/completions by default, /v1/completions with a local --template). Interactive
// on a terminal; with stdin piped (or --prompt) it sends one message and prints one reply. Exit
// codes are listed in kFooter and docs/CLIENT.md.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <string>

#include "cli/cli.h"
#include "chat_cli/chat_session.h"
#include "chat_cli/chat_template.h"
#include "chat_cli/http_stream.h"
#include "chat_cli/line_reader.h"

using namespace flashserve::chat;

namespace {

// docs/CLIENT.md#exit-status; 1 and 2 follow every flashserve program (cli/cli.h).
enum ExitCode { kExitOk = 0, kExitUnreachable = 1, kExitUsage = flashserve::cli::kUsageError,
                kExitServer = 3, kExitAuth = 4, kExitInterrupted = 130 };

const char* kAbout = R"(Chat with a flashserve server from the terminal. The reply streams as it is generated; the
conversation is kept and sent each turn, trimmed to the model's context. By default the server
renders it with the model's own chat template (POST /v1/chat/completions).
With stdin not a terminal (a pipe or file) or with --prompt, sends one message and prints one reply.)";

const char* kFooter = R"(
Commands (interactive): /reset  /system [TEXT]  /temp X  /max N  /help  /quit
Ctrl-C stops the reply being written (the server cancels it); Ctrl-D or /quit leaves.

Exit status: 0 ok; 1 server unreachable; 2 usage error; 3 server error (an error status or a
broken stream); 4 API key missing or rejected (401); 130 interrupted (one-shot mode).)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "flashserve-chat: %s (see --help)\n", msg.c_str());
  std::exit(kExitUsage);
}

struct Flags {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;
  std::string prompt;
  bool has_prompt = false;
  bool template_chosen = false;  // --template given: no fallback from "server"
  SessionOptions session;
};

// Parses the command line (cli/cli.h conventions); exits 0 after --help, 2 on a usage error.
Flags parse_flags(int argc, char** argv) {
  Flags f;
  if (const char* key = std::getenv("FLASHSERVE_API_KEY")) f.api_key = key;
  std::string template_name;
  CLI::App app{kAbout, "flashserve-chat"};
  app.footer(std::string(kFooter) + (line_editing_available()
                                         ? "\n\nLine editing and history (arrow keys): on (libedit)."
                                         : "\n\nLine editing: off (built without libedit): plain line input."));
  app.add_option("--url", f.url, "server base URL")->capture_default_str();
  app.add_option("--api-key", f.api_key, "API key sent as \"Authorization: Bearer KEY\" (default: env FLASHSERVE_API_KEY)");
  app.add_option("--template", template_name,
                 "server (default): the server's chat template. Fallback for servers without "
                 "/v1/chat/completions (or without a template): render the prompt here and use "
                 "/v1/completions: plain | llama2 (or llama-2) | chatml | zephyr")
      ->check(CLI::Validator(
          [](std::string& v) {
            return parse_template_kind(v) ? std::string() : "must be server, plain, llama2, chatml or zephyr";
          },
          "NAME"));
  app.add_option("--system", f.session.system, "system prompt");
  app.add_option("--temp", f.session.temperature, "sampling temperature (0 = greedy)")
      ->check(CLI::Range(0.0, 2.0))->capture_default_str();
  app.add_option("--max", f.session.max_tokens, "the most tokens per reply")
      ->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--prompt", f.prompt, "send TEXT as one message, print the reply, exit");
  if (const int rc = flashserve::cli::parse(app, argc, argv); rc >= 0) std::exit(rc);
  if (!template_name.empty()) f.session.kind = *parse_template_kind(template_name);
  f.template_chosen = !template_name.empty();
  f.has_prompt = app.count("--prompt") > 0;
  return f;
}

void on_sigint(int) { g_interrupted = true; }

void install_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read() waiting for input returns EINTR
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

std::string trim_right(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r' || s.back() == '\t')) {
    s.pop_back();
  }
  return s;
}

// One exchange: prepares the prompt (trimming the history), streams the reply to stdout, retries
// with fewer turns when the server says the prompt is too long. Returns the stream's result.
struct TurnOutput {
  StreamResult result;
  std::string reply;
};

TurnOutput run_turn(ApiClient& api, ChatSession& session, const std::string& model_id,
                    const std::string& user, bool interactive) {
  TurnOutput out;
  PreparedPrompt p = session.prepare(user);
  int dropped = p.dropped_turns;
  for (;;) {
    if (interactive && dropped > 0) {  // said before the reply that it starts from less history
      std::fprintf(stderr, "[dropped %d oldest turn%s to fit the context]\n", dropped,
                   dropped == 1 ? "" : "s");
      dropped = 0;
    }
    const bool server_template = session.options().kind == TemplateKind::kServer;
    nlohmann::json req = {{"max_tokens", session.options().max_tokens},
                          {"temperature", session.options().temperature},
                          {"stream_options", {{"include_usage", true}}}};
    if (server_template) {
      req["messages"] = p.messages;
    } else {
      req["prompt"] = p.prompt;
      req["stop"] = stop_strings(session.options().kind);
    }
    if (!model_id.empty()) req["model"] = model_id;
    bool at_start = true;
    out.reply.clear();
    auto on_text = [&](const std::string& t) {
      std::string piece = t;
      if (at_start) {  // the model's leading space/newline is not shown
        size_t b = piece.find_first_not_of(" \n\r\t");
        if (b == std::string::npos) return;
        piece.erase(0, b);
        at_start = false;
      }
      out.reply += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
    out.result = api.stream_completion(req, on_text, &g_interrupted,
                                       server_template ? Endpoint::kChat : Endpoint::kCompletions);
    if (out.result.outcome == Outcome::kHttpError && out.result.status == 400 &&
        out.result.error_code == "context_length_exceeded" && session.drop_oldest()) {
      p = session.prepare(user);
      dropped = 1 + p.dropped_turns;
      continue;
    }
    if (out.result.prompt_tokens > 0) session.observe_usage(p.prompt.size(), out.result.prompt_tokens);
    break;
  }
  return out;
}

int exit_code_for(const StreamResult& r) {
  switch (r.outcome) {
    case Outcome::kOk: return kExitOk;
    case Outcome::kCancelled: return kExitInterrupted;
    case Outcome::kUnreachable: return kExitUnreachable;
    case Outcome::kHttpError: return r.status == 401 ? kExitAuth : kExitServer;
    case Outcome::kStreamError: return kExitServer;
  }
  return kExitServer;
}

const char* kNoServerTemplate =
    "(the server cannot render chat prompts for this model: start flashserve with "
    "--chat-template NAME|FILE, or render them here with --template plain|llama2|chatml|zephyr)";

std::string describe_error(const StreamResult& r, const std::string& url) {
  switch (r.outcome) {
    case Outcome::kUnreachable:
      return r.message + " (is flashserve running there? see --url)";
    case Outcome::kHttpError:
      if (r.status == 401) {
        return "the server rejected the API key (401: " + r.message +
               "); pass --api-key or set FLASHSERVE_API_KEY";
      }
      if (r.error_code == "context_length_exceeded") {
        return "the message does not fit the model's context (" + r.message + ")";
      }
      if (r.error_code == "chat_template_missing" || r.status == 404) {
        return "the server answered " + std::to_string(r.status) + ": " + r.message + "\n" +
               kNoServerTemplate;
      }
      return "the server answered " + std::to_string(r.status) + ": " + r.message;
    case Outcome::kStreamError:
      return "the reply failed: " + r.message;
    default:
      return "";
  }
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = parse_flags(argc, argv);
  auto base = parse_base_url(flags.url);
  if (!base) usage_error("--url must look like http://HOST:PORT, got '" + flags.url + "'");
  const bool interactive = !flags.has_prompt && isatty(STDIN_FILENO);

  ApiClient api(*base, flags.api_key);
  ModelsResult models = api.models();
  if (models.outcome == Outcome::kUnreachable) {
    std::fprintf(stderr, "flashserve-chat: %s (is flashserve running there? see --url)\n",
                 models.message.c_str());
    return kExitUnreachable;
  }
  if (models.outcome != Outcome::kOk) {
    if (models.status == 401) {
      std::fprintf(stderr, "flashserve-chat: the server rejected the API key (401: %s); pass "
                   "--api-key or set FLASHSERVE_API_KEY\n", models.message.c_str());
      return kExitAuth;
    }
    std::fprintf(stderr, "flashserve-chat: GET /v1/models: the server answered %d: %s\n",
                 models.status, models.message.c_str());
    return kExitServer;
  }
  flags.session.max_model_len = models.max_model_len;
  if (models.max_model_len > 0 && flags.session.max_tokens >= models.max_model_len) {
    flags.session.max_tokens = models.max_model_len / 2;
    std::fprintf(stderr, "flashserve-chat: --max lowered to %d (the model's context is %d tokens)\n",
                 flags.session.max_tokens, models.max_model_len);
  }
  if (flags.session.kind == TemplateKind::kServer && models.chat_template == false) {
    if (flags.template_chosen) {
      std::fprintf(stderr, "flashserve-chat: model %s has no chat template on the server %s\n",
                   models.model_id.c_str(), kNoServerTemplate);
      return kExitServer;
    }
    // A base model (the default stories260K among them): the plain format is the one that
    // suits it, so a newcomer's first `flashserve-chat` talks instead of stopping.
    std::fprintf(stderr, "flashserve-chat: model %s has no chat template on the server; using "
                 "the plain prompt format over /v1/completions (--template picks another)\n",
                 models.model_id.c_str());
    flags.session.kind = TemplateKind::kPlain;
  }
  ChatSession session(flags.session);
  install_sigint();  // from here Ctrl-C stops a reply (before it, it ends the program as usual)

  if (!interactive) {  // one message, one reply
    std::string text = flags.prompt;
    if (!flags.has_prompt) {
      text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    }
    text = trim_right(text);
    if (text.empty()) usage_error("no message: stdin was empty");
    TurnOutput t = run_turn(api, session, models.model_id, text, false);
    if (!t.reply.empty()) std::fputs("\n", stdout);
    std::fflush(stdout);
    if (t.result.outcome != Outcome::kOk && t.result.outcome != Outcome::kCancelled) {
      std::fprintf(stderr, "flashserve-chat: %s\n", describe_error(t.result, flags.url).c_str());
    }
    return exit_code_for(t.result);
  }

  std::printf("flashserve-chat: %s, model %s (context %d tokens), template %s\n",
              base->scheme_host_port.c_str(), models.model_id.c_str(), models.max_model_len,
              template_name(flags.session.kind).c_str());
  std::printf("Type a message; /help lists commands; Ctrl-C stops a reply; /quit or Ctrl-D leaves.\n");
  std::fflush(stdout);
  for (;;) {
    g_interrupted = false;
    auto line = read_line("> ");
    if (!line) {
      std::fputs("\n", stdout);
      break;
    }
    std::string text = trim_right(*line);
    if (text.empty()) continue;
    add_to_history(text);
    CommandResult cmd = session.handle_command(text);
    if (cmd.action == CommandAction::kQuit) break;
    if (cmd.action == CommandAction::kHandled) {
      if (!cmd.message.empty()) std::printf("%s\n", cmd.message.c_str());
      continue;
    }
    TurnOutput t = run_turn(api, session, models.model_id, text, true);
    switch (t.result.outcome) {
      case Outcome::kOk:
        std::fputs("\n", stdout);
        session.commit(text, trim_right(t.reply));
        break;
      case Outcome::kCancelled:
        std::fputs("\n[interrupted]\n", stdout);
        if (!t.reply.empty()) session.commit(text, trim_right(t.reply));
        break;
      default:
        if (!t.reply.empty()) std::fputs("\n", stdout);
        std::printf("error: %s\n", describe_error(t.result, flags.url).c_str());
        break;
    }
    std::fflush(stdout);
  }
  return kExitOk;
}
