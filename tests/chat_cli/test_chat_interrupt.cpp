// flashserve-chat one-shot replies that do not end normally, against a scripted fake server
// (tests/chat_cli/fake_sse_server.h): Ctrl-C (SIGINT) mid-reply exits 130 after printing the text
// so far and hangs up on the server; an error event, a cut connection, a stream that stops
// before its end, and a 503 exit 3 with the text so far on stdout and the reason on stderr.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/chat_cli/fake_sse_server.h"
#include "tests/common/exec_args.h"

namespace flashserve::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// flashserve-chat as a child process, stdin from /dev/null, stdout and stderr read back.
class ChatProcess {
 public:
  explicit ChatProcess(std::vector<std::string> args) {
    args.insert(args.begin(), std::string(FS_BINARY_DIR) + "/chat_cli/flashserve-chat");
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      int null_fd = open("/dev/null", O_RDONLY);
      dup2(null_fd, 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      close(out[0]);
      close(err[0]);
      unsetenv("FLASHSERVE_API_KEY");
      flashserve::test::exec_args(args);
    }
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~ChatProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

  // Reads stdout until it contains `text`; whether it did within the timeout.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (out_.find(text) == std::string::npos && Clock::now() < deadline) {
      if (!read_some(20)) break;
    }
    return out_.find(text) != std::string::npos;
  }

  // Reads both pipes to their end and reaps the child: its exit status, -1 for a signal, -2 if
  // it is still running after the timeout.
  int finish(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while ((out_fd_ >= 0 || err_fd_ >= 0) && Clock::now() < deadline) read_some(20);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() >= deadline) return -2;
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  // Waits up to `ms` for either pipe; false once both have ended.
  bool read_some(int ms) {
    pollfd p[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (out_fd_ < 0 && err_fd_ < 0) return false;
    if (poll(p, 2, ms) <= 0) return true;
    int* fds[2] = {&out_fd_, &err_fd_};
    std::string* bufs[2] = {&out_, &err_};
    for (int i = 0; i < 2; ++i) {
      if (*fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t n = read(*fds[i], buf, sizeof buf);
      if (n > 0) {
        bufs[i]->append(buf, n);
      } else {
        close(*fds[i]);
        *fds[i] = -1;
      }
    }
    return true;
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::string out_, err_;
};

std::vector<std::string> chat_args(int port, const std::string& prompt) {
  return {"--url", "http://127.0.0.1:" + std::to_string(port), "--temp", "0", "--max", "1000",
          "--prompt", prompt};
}

// A long reply (400 events, 25 ms apart: 10 s) interrupted after its first words.
TEST(ChatInterrupt, SigintMidReplyExits130AfterPrintingTheTextSoFar) {
  const std::vector<std::string> words = {" Once", " upon", " a", " time", ",", " there", " was",
                                          " a", " dog", "."};
  ReplyScript script;
  for (int i = 0; i < 40; ++i) script.texts.insert(script.texts.end(), words.begin(), words.end());
  script.interval = 25ms;
  std::string full;
  for (const auto& t : script.texts) full += t;
  full.erase(0, 1);  // the client drops the reply's leading space
  FakeSseServer server(script);
  ASSERT_GT(server.port(), 0);

  ChatProcess chat(chat_args(server.port(), "Tell me a story"));
  ASSERT_GT(chat.pid(), 0);
  ASSERT_TRUE(chat.wait_for_output("Once upon a time, there", 15s)) << chat.out() << chat.err();
  ASSERT_EQ(kill(chat.pid(), SIGINT), 0);
  const auto sent_at = Clock::now();
  EXPECT_EQ(chat.finish(5s), 130) << chat.out() << chat.err();
  EXPECT_LT(Clock::now() - sent_at, 2s);  // it stops at once, not when the reply would end

  // stdout: the reply as far as it came, then one newline; nothing after the interruption.
  const std::string& out = chat.out();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  const std::string text = out.substr(0, out.size() - 1);
  EXPECT_EQ(full.rfind(text, 0), 0u) << "not a prefix of the reply: " << text;
  EXPECT_GE(text.size(), std::string("Once upon a time, there").size());
  EXPECT_LT(text.size(), full.size() / 2) << "the reply was not interrupted";
  EXPECT_EQ(chat.err().find("flashserve-chat:"), std::string::npos) << chat.err();

  // The server saw the client hang up (that is what makes flashserve cancel the request) long
  // before the script ran out.
  const auto deadline = Clock::now() + 2s;
  while (!server.client_hung_up() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(server.client_hung_up());
  EXPECT_LT(server.events_sent(), static_cast<int>(script.texts.size()) / 2);
  const auto body = nlohmann::json::parse(server.completion_body(), nullptr, false);
  ASSERT_TRUE(body.is_object()) << server.completion_body();
  EXPECT_EQ(body.value("stream", false), true);
  EXPECT_EQ(body.value("max_tokens", 0), 1000);
  // The default: the server's chat template, so the conversation goes as messages.
  ASSERT_TRUE(body.contains("messages")) << body.dump();
  EXPECT_EQ(body["messages"].back()["role"], "user");
  EXPECT_EQ(body["messages"].back()["content"], "Tell me a story");
  EXPECT_FALSE(body.contains("prompt"));
}

// Each way a stream can fail after some text: exit 3, the text so far on stdout (ended by one
// newline), and one line on stderr naming the reason. kDone is the control: the fake server's
// normal reply is a success, so the failures come from the ends alone.
TEST(ChatInterrupt, BrokenStreamsExit3AfterPrintingTheTextSoFar) {
  struct Case {
    ReplyEnd end;
    int exit_code;
    std::string out, err;
  };
  const std::vector<Case> cases = {
      {ReplyEnd::kDone, 0, "Once upon a time\n", ""},
      {ReplyEnd::kErrorEvent, 3, "Once upon a time\n",
       "flashserve-chat: the reply failed: the engine failed: out of KV blocks\n"},
      {ReplyEnd::kCutMidChunk, 3, "Once upon a time\n",
       "flashserve-chat: the reply failed: the connection to http://127.0.0.1:PORT broke while "
       "reading the reply\n"},
      {ReplyEnd::kEndWithoutDone, 3, "Once upon a time\n",
       "flashserve-chat: the reply failed: the stream ended before the reply was complete\n"},
      {ReplyEnd::kStatus503, 3, "",
       "flashserve-chat: the server answered 503: the server is overloaded, retry later\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.end));
    FakeSseServer server({{" Once", " upon", " a", " time"}, 0ms, c.end});
    ASSERT_GT(server.port(), 0);
    ChatProcess chat(chat_args(server.port(), "Tell me a story"));
    EXPECT_EQ(chat.finish(20s), c.exit_code) << chat.out() << chat.err();
    EXPECT_EQ(chat.out(), c.out);
    std::string err = c.err;
    if (size_t at = err.find("PORT"); at != std::string::npos) {
      err.replace(at, 4, std::to_string(server.port()));
    }
    EXPECT_EQ(chat.err(), err);
  }
}

}  // namespace
}  // namespace flashserve::testing
