// line_reader: libedit's readline interface when FS_HAVE_LIBEDIT, else plain read() of lines.
#include "chat_cli/line_reader.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#ifdef FS_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace flashserve::chat {

std::atomic<bool> g_interrupted{false};

namespace {
// A key read after an unnoticed Ctrl-C: it ends the cancelled line and starts the next one.
int g_pending_key = -1;
}  // namespace

int read_key() {
  if (g_pending_key >= 0) {
    int c = g_pending_key;
    g_pending_key = -1;
    return c;
  }
  for (;;) {
    unsigned char c = 0;
    ssize_t n = ::read(STDIN_FILENO, &c, 1);
    const bool interrupted = g_interrupted.exchange(false);
    if (n == 1) {
      if (!interrupted) return c;
      g_pending_key = c;
      return kKeyInterrupted;
    }
    if (interrupted) return kKeyInterrupted;
    if (n == 0 || errno != EINTR) return EOF;
  }
}

#ifdef FS_HAVE_LIBEDIT

namespace {

bool g_line_cancelled = false;

// libedit's character source. Our SIGINT handler is installed without SA_RESTART, so Ctrl-C
// interrupts read(): we end the line there and read_line discards it.
int getc_with_interrupt(FILE*) {
  int c = read_key();
  if (c != kKeyInterrupted) return c;
  g_line_cancelled = true;
  return '\n';
}

void init_once() {
  static bool done = false;
  if (done) return;
  done = true;
  rl_catch_signals = 0;  // our handler, not libedit's
  rl_getc_function = getc_with_interrupt;
  rl_initialize();
}

}  // namespace

std::optional<std::string> read_line(const std::string& prompt) {
  init_once();
  g_line_cancelled = false;
  char* line = readline(prompt.c_str());
  if (g_line_cancelled) {
    std::free(line);
    return std::string();
  }
  if (!line) {
    if (g_interrupted.exchange(false)) return std::string();
    return std::nullopt;
  }
  std::string s(line);
  std::free(line);
  return s;
}

void add_to_history(const std::string& line) { add_history(line.c_str()); }
bool line_editing_available() { return true; }

#else  // plain line input

// read() on fd 0 rather than std::getline: a Ctrl-C (EINTR) must discard the line, while
// std::cin would take it for end of input.
std::optional<std::string> read_line(const std::string& prompt) {
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::string s;
  for (;;) {
    int c = read_key();
    if (c == kKeyInterrupted) {
      std::fputs("\n", stdout);
      return std::string();
    }
    if (c == EOF) {
      if (s.empty()) return std::nullopt;  // end of input
      return s;
    }
    if (c == '\n') return s;
    s += static_cast<char>(c);
  }
}

void add_to_history(const std::string&) {}
bool line_editing_available() { return false; }

#endif

}  // namespace flashserve::chat
