// line_reader: libedit's readline interface when FS_HAVE_LIBEDIT, else plain read() of lines.
#include "client/line_reader.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#ifdef FS_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace flashserve::chat {

std::atomic<bool> g_interrupted{false};

#ifdef FS_HAVE_LIBEDIT

namespace {

bool g_line_cancelled = false;

// libedit's character source. Our SIGINT handler is installed without SA_RESTART, so Ctrl-C
// interrupts read(): we end the line there and read_line discards it.
int getc_with_interrupt(FILE*) {
  for (;;) {
    unsigned char c = 0;
    ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) return c;
    if (n == 0) return EOF;
    if (errno != EINTR) return EOF;
    if (g_interrupted.exchange(false)) {
      g_line_cancelled = true;
      return '\n';
    }
  }
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
    char c = 0;
    ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') return s;
      s += c;
      continue;
    }
    if (n < 0 && errno == EINTR) {
      if (!g_interrupted.exchange(false)) continue;
      std::fputs("\n", stdout);
      return std::string();
    }
    if (s.empty()) return std::nullopt;  // end of input
    return s;
  }
}

void add_to_history(const std::string&) {}
bool line_editing_available() { return false; }

#endif

}  // namespace flashserve::chat
