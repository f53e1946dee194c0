// TmuxPane: runs a command in a detached tmux session on a private socket and drives it as a
// person would: types keys (send-keys), reads the screen (capture-pane), waits for text to show,
// and reads the command's exit status after it ends (remain-on-exit). Plus run_capture for
// one-shot commands.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

namespace flashserve::testing {

// Runs `cmd` through /bin/sh; returns its exit status (-1 if killed) and stdout in *out.
inline int run_capture(const std::string& cmd, std::string* out = nullptr) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  std::string s;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) s.append(buf, n);
  int status = pclose(p);
  if (out) *out = s;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Single-quotes `s` for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

class TmuxPane {
 public:
  // Starts `command` in a 120x40 pane; the socket lives in the build dir.
  explicit TmuxPane(const std::string& command) {
    socket_ = std::string(FS_BINARY_DIR) + "/tmux_chat_test_" + std::to_string(getpid()) + "_" +
              std::to_string(counter()++) + ".sock";
    tmux("-f /dev/null new-session -d -s t -x 120 -y 40 " + shell_quote(command));
    tmux("set-option -t t remain-on-exit on");
  }
  ~TmuxPane() {
    tmux("kill-server");
    unlink(socket_.c_str());
  }

  // Types literal text (no key names), then optionally Enter.
  void type(const std::string& text, bool enter = true) {
    tmux("send-keys -t t -l " + shell_quote(text));
    if (enter) tmux("send-keys -t t Enter");
  }
  void key(const std::string& name) { tmux("send-keys -t t " + name); }

  // The visible screen plus scrollback, trailing blank lines removed.
  std::string screen() {
    std::string s;
    run_capture("tmux -S " + socket_ + " capture-pane -p -J -S -200 -t t 2>/dev/null", &s);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  // Polls the screen until `pred` holds; returns whether it did within the timeout.
  bool wait_for(const std::function<bool(const std::string&)>& pred, double timeout_s = 10) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred(screen())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return pred(screen());
  }
  bool wait_for_text(const std::string& text, double timeout_s = 10) {
    return wait_for([&](const std::string& s) { return s.find(text) != std::string::npos; },
                    timeout_s);
  }
  // Types `line` (and Enter), then waits for `answer` on the screen.
  bool type_and_wait(const std::string& line, const std::string& answer) {
    type(line);
    return wait_for_text(answer);
  }

  // After the command ended: its exit status; -1 while it still runs (waits up to timeout_s).
  int exit_status(double timeout_s = 5) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int>(timeout_s * 1000));
    for (;;) {
      std::string out;
      run_capture("tmux -S " + socket_ +
                  " display-message -p -t t '#{pane_dead} #{pane_dead_status}' 2>/dev/null", &out);
      if (out.rfind("1 ", 0) == 0) return std::atoi(out.c_str() + 2);
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  void tmux(const std::string& args) {
    run_capture("tmux -S " + socket_ + " " + args + " >/dev/null 2>&1");
  }
  std::string socket_;
};

}  // namespace flashserve::testing
