// flashserve-chat driven as a person would, in a tmux pane, against the real `flashserve`
// serving stories260K on 127.0.0.1: the streamed reply shows (and is the greedy text), commands
// work, Ctrl-C mid-reply returns to the prompt and the server cancels the request, the history is
// trimmed to the 512-token context, /quit exits 0.
#include <signal.h>

#include <atomic>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/chat_cli/tmux_pane.h"
#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

std::string chat_binary() { return std::string(FS_BINARY_DIR) + "/chat_cli/flashserve-chat"; }

std::string chat_command(int port, const std::string& extra) {
  // The plain local template (the fallback for servers without a chat template): stories260K
  // has none, and the reply it should give is then a plain completion (greedy_reply).
  return "env -u FLASHSERVE_API_KEY " + chat_binary() + " --template plain --url http://127.0.0.1:" +
         std::to_string(port) + " " + extra;
}

// The reply the client should show for a first message under the plain template at temperature 0.
std::string greedy_reply(int port, const std::string& user, int max_tokens) {
  nlohmann::json body = {{"prompt", "User: " + user + "\nAssistant:"},
                         {"max_tokens", max_tokens},
                         {"temperature", 0},
                         {"stop", {"\nUser:"}}};
  nlohmann::json r = complete(port, body);
  std::string text = r["choices"][0]["text"];
  return text.substr(text.find_first_not_of(" \n"));
}

// Text on the screen after the last occurrence of `marker`.
std::string after(const std::string& screen, const std::string& marker) {
  size_t at = screen.rfind(marker);
  return at == std::string::npos ? "" : screen.substr(at + marker.size());
}

// Slows the server down (SIGSTOP/SIGCONT duty cycle, ~10% running) so that a reply takes
// seconds: stories260K otherwise writes 400 tokens in a fraction of a second, faster than a
// person (or this test) can press Ctrl-C.
class Throttle {
 public:
  explicit Throttle(pid_t pid) : pid_(pid), thread_([this] {
    while (!stop_) {
      kill(pid_, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(27));
      kill(pid_, SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  }) {}
  ~Throttle() { release(); }
  void release() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    kill(pid_, SIGCONT);
  }

 private:
  pid_t pid_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class ChatTmux : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_capture("command -v tmux >/dev/null"), 0) << "tmux is not installed";
    ASSERT_TRUE(server_.started()) << server_.log();
  }
  ServerProcess server_;
};

TEST_F(ChatTmux, StreamsRepliesRunsCommandsAndQuits) {
  const std::string expected = greedy_reply(server_.port(), "Once upon a time", 40);
  const std::string first_line = expected.substr(0, std::min(expected.find('\n'), size_t{60}));
  ASSERT_FALSE(first_line.empty());

  TmuxPane pane(chat_command(server_.port(), "--temp 0 --max 40"));
  ASSERT_TRUE(pane.wait_for_text("Type a message")) << pane.screen();
  EXPECT_NE(pane.screen().find("model stories260K (context 512 tokens)"), std::string::npos);

  pane.type("Once upon a time");
  ASSERT_TRUE(pane.wait_for([&](const std::string& s) {
    return after(s, "> Once upon a time").find(first_line) != std::string::npos &&
           s.size() > 2 && s.substr(s.size() - 2) == "\n>";
  })) << "expected the reply '" << first_line << "' and a new prompt:\n" << pane.screen();

  EXPECT_TRUE(pane.type_and_wait("/temp 1.5", "[temperature 1.5]")) << pane.screen();
  EXPECT_TRUE(pane.type_and_wait("/temp 7", "usage: /temp X")) << pane.screen();
  EXPECT_TRUE(pane.type_and_wait("/help", "/system TEXT")) << pane.screen();
  EXPECT_TRUE(pane.type_and_wait("/bogus", "unknown command /bogus")) << pane.screen();

  pane.type("/quit");
  EXPECT_EQ(pane.exit_status(), 0) << pane.screen();
}

TEST_F(ChatTmux, CtrlCStopsTheReplyAndTheServerCancelsIt) {
  TmuxPane pane(chat_command(server_.port(), "--temp 0 --max 400"));
  ASSERT_TRUE(pane.wait_for_text("Type a message")) << pane.screen();
  const double generated_before = metric(server_.port(), "flashserve_generation_tokens_total");
  const double disconnects_before = metric(server_.port(), "flashserve_client_disconnects_total");

  {
    Throttle slow(server_.pid());
    pane.type("Tell me a long story");
    // Mid-reply: some text is on the screen but no new prompt yet.
    ASSERT_TRUE(pane.wait_for([](const std::string& s) {
      std::string reply = after(s, "> Tell me a long story\n");
      return reply.find_first_not_of(" \n") != std::string::npos;
    }, 30)) << pane.screen();
    pane.key("C-c");
    EXPECT_TRUE(pane.wait_for([](const std::string& s) {
      return after(s, "[interrupted]") == "\n>";
    }, 10)) << "Ctrl-C did not return to the prompt:\n" << pane.screen();
  }

  // The server saw the disconnect, cancelled the request and freed its KV blocks.
  EXPECT_EQ(wait_metric(server_.port(), "flashserve_requests_running", 0, std::chrono::seconds(10)), 0);
  EXPECT_EQ(wait_metric(server_.port(), "flashserve_kv_blocks_used", 0, std::chrono::seconds(10)), 0);
  EXPECT_GE(metric(server_.port(), "flashserve_client_disconnects_total"), disconnects_before + 1);
  EXPECT_LT(metric(server_.port(), "flashserve_generation_tokens_total") - generated_before, 400)
      << "the reply was not cut short";

  // The client is still there: Ctrl-C on a half-typed line discards it, commands still work.
  pane.type("half a line", false);
  pane.key("C-c");
  EXPECT_TRUE(pane.type_and_wait("/help", "Ctrl-C stops the reply")) << pane.screen();
  pane.key("C-d");  // end of input leaves too
  EXPECT_EQ(pane.exit_status(), 0) << pane.screen();
}

TEST_F(ChatTmux, HistoryIsTrimmedToTheContext) {
  // Each exchange is ~300 bytes of question and up to 100 tokens of answer: by the third the
  // 512-token context (minus --max 100) cannot hold them all.
  TmuxPane pane(chat_command(server_.port(), "--temp 0 --max 100"));
  ASSERT_TRUE(pane.wait_for_text("Type a message")) << pane.screen();
  std::string message;
  while (message.size() < 300) message += "The little cat sat on the warm mat. ";
  for (int turn = 0; turn < 4; ++turn) {
    pane.type(message + std::to_string(turn));
    ASSERT_TRUE(pane.wait_for([&](const std::string& s) {
      std::string rest = after(s, message + std::to_string(turn));
      return rest.size() > 2 && rest.substr(rest.size() - 2) == "\n>";
    }, 30)) << pane.screen();
  }
  const std::string s = pane.screen();
  EXPECT_NE(s.find("oldest turn"), std::string::npos) << s;
  EXPECT_EQ(s.find("error:"), std::string::npos) << s;
  pane.type("/quit");
  EXPECT_EQ(pane.exit_status(), 0);
}

// The estimate is calibrated on English (~1.9 bytes per token with tok512); a message of digits
// is one token per byte, so the estimate fits but the server answers 400
// context_length_exceeded: the client drops the oldest turn and retries, without an error.
TEST_F(ChatTmux, ServerRejectionDropsTheOldestTurnAndRetries) {
  TmuxPane pane(chat_command(server_.port(), "--temp 0 --max 100"));
  ASSERT_TRUE(pane.wait_for_text("Type a message")) << pane.screen();
  // ~2.5 bytes per token here: the estimate becomes 2.1 bytes per token (with the margin).
  const std::string first =
      "Once upon a time there was a little girl named Lily who loved to play in the park with "
      "her dog.";
  pane.type(first);
  ASSERT_TRUE(pane.wait_for([&](const std::string& s) {
    std::string rest = after(s, first);
    return rest.size() > 2 && rest.substr(rest.size() - 2) == "\n>";
  }, 30)) << pane.screen();
  const std::string kBadRequests = "flashserve_http_requests_total{status=\"400\"}";
  const double rejected_before = std::max(0.0, metric(server_.port(), kBadRequests));

  // Estimated ~310 tokens with the history (fits the 412 budget); really ~490: the server
  // rejects it; without the first exchange it is ~350 and fits.
  const std::string digits(340, '9');
  pane.type(digits);
  ASSERT_TRUE(pane.wait_for([&](const std::string& s) {
    std::string rest = after(s, digits);
    return rest.size() > 2 && rest.substr(rest.size() - 2) == "\n>";
  }, 30)) << pane.screen();
  const std::string s = pane.screen();
  EXPECT_NE(after(s, digits).find("[dropped 1 oldest turn to fit the context]"), std::string::npos) << s;
  EXPECT_EQ(s.find("error:"), std::string::npos) << s;
  EXPECT_EQ(metric(server_.port(), kBadRequests) - rejected_before, 1) << "no 400 retry happened";
  pane.type("/quit");
  EXPECT_EQ(pane.exit_status(), 0);
}

// With libedit (the build found libedit-dev), the Up arrow recalls the previous line. Without it
// the client reads plain lines and there is nothing to check: the test says so and skips.
TEST_F(ChatTmux, UpArrowRecallsThePreviousLineWithLibedit) {
  std::string help;
  ASSERT_EQ(run_capture(chat_binary() + " --help", &help), 0);
  if (help.find("history (arrow keys): on") == std::string::npos) {
    GTEST_SKIP() << "flashserve-chat was built without libedit: no line editing to test";
  }
  TmuxPane pane(chat_command(server_.port(), "--temp 0 --max 20"));
  ASSERT_TRUE(pane.wait_for_text("Type a message")) << pane.screen();
  ASSERT_TRUE(pane.type_and_wait("/temp 0.25", "[temperature 0.25]")) << pane.screen();
  ASSERT_TRUE(pane.type_and_wait("/max 7", "[max tokens 7]")) << pane.screen();
  pane.key("Up");
  pane.key("Up");  // two lines back: /temp 0.25
  pane.key("Enter");
  EXPECT_TRUE(pane.wait_for([](const std::string& s) {
    return after(s, "[max tokens 7]").find("[temperature 0.25]") != std::string::npos;
  })) << "Up Up Enter did not repeat /temp 0.25:\n" << pane.screen();
  pane.type("/quit");
  EXPECT_EQ(pane.exit_status(), 0) << pane.screen();
}

}  // namespace
}  // namespace flashserve::testing
