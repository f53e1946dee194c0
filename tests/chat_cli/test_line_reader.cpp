// The line reader with stdin replaced by a pipe: a Ctrl-C that arrives while the reader is not
// blocked in read() (the flag is already set when the next key comes) cancels the line, and that
// key starts the next line instead of being lost. read_key is what both readers (libedit and
// plain) use; read_line itself is tested here in the plain build (libedit needs a terminal:
// test_chat_tmux drives that one).
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "chat_cli/line_reader.h"

namespace flashserve::chat {
namespace {

// Puts the write end of a pipe on stdin's place for the test's lifetime.
class PipeStdin {
 public:
  PipeStdin() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    saved_ = dup(STDIN_FILENO);
    dup2(fds[0], STDIN_FILENO);
    close(fds[0]);
    write_fd_ = fds[1];
  }
  ~PipeStdin() {
    if (write_fd_ >= 0) close(write_fd_);
    dup2(saved_, STDIN_FILENO);
    close(saved_);
  }
  void write(const std::string& s) { ASSERT_EQ(::write(write_fd_, s.data(), s.size()), ssize_t(s.size())); }
  void close_input() {
    close(write_fd_);
    write_fd_ = -1;
  }

 private:
  int saved_ = -1;
  int write_fd_ = -1;
};

TEST(LineReader, ReadKeyReportsALateInterruptAndKeepsTheKey) {
  PipeStdin in;
  in.write("ab");
  EXPECT_EQ(read_key(), 'a');
  g_interrupted = true;
  EXPECT_EQ(read_key(), kKeyInterrupted);
  EXPECT_FALSE(g_interrupted.load());
  EXPECT_EQ(read_key(), 'b');  // the key that came with the interrupt
  in.close_input();
  EXPECT_EQ(read_key(), EOF);
}

TEST(LineReader, InterruptBeforeTheNextKeyDiscardsTheLineAndKeepsTheKey) {
  if (line_editing_available()) {
    GTEST_SKIP() << "libedit build: read_line needs a terminal; test_chat_tmux covers it";
  }
  PipeStdin in;
  in.write("first\n");
  EXPECT_EQ(read_line(""), "first");
  g_interrupted = true;  // Ctrl-C landed while no read() was waiting
  in.write("/help\nlast");
  EXPECT_EQ(read_line(""), "");  // the interrupted line, discarded
  EXPECT_FALSE(g_interrupted.load());
  EXPECT_EQ(read_line(""), "/help");  // its first key kept
  in.close_input();
  EXPECT_EQ(read_line(""), "last");  // a last line without newline
  EXPECT_EQ(read_line(""), std::nullopt);  // end of input
}

}  // namespace
}  // namespace flashserve::chat
