// flashserve-chat without a terminal: a message piped on stdin gives one reply on stdout (the
// greedy text, exactly: the server's chat reply by default, a plain completion with --template
// plain), and each failure has its documented exit status and message: 1 unreachable, 2 usage,
// 3 server error (also: --template server and the server has no chat template), 4 API key
// rejected; without --template, a server with no chat template gets the plain format.
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>

#include <gtest/gtest.h>

#include "tests/chat_cli/tmux_pane.h"
#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

std::string chat(int port, const std::string& args) {
  return "env -u FLASHSERVE_API_KEY " + std::string(FS_BINARY_DIR) +
         "/chat_cli/flashserve-chat --url http://127.0.0.1:" + std::to_string(port) + " " + args;
}

// A loopback port nobody listens on (bound, read back, closed).
int unused_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

TEST(ChatOneShot, DefaultIsTheServersChatTemplate) {
  ServerProcess server({"--chat-template", "chatml"});
  ASSERT_TRUE(server.started()) << server.log();
  http::Response res = http::request(
      server.port(), "POST", "/v1/chat/completions",
      nlohmann::json{{"messages", {{{"role", "system"}, {"content", "Be kind."}},
                                   {{"role", "user"}, {"content", "Where is the dog?"}}}},
                     {"max_tokens", 30},
                     {"temperature", 0}}.dump());
  ASSERT_EQ(res.status, 200) << res.body;
  std::string expected = nlohmann::json::parse(res.body)["choices"][0]["message"]["content"];
  expected = expected.substr(expected.find_first_not_of(" \n")) + "\n";
  std::string out;
  EXPECT_EQ(run_capture("printf 'Where is the dog?\\n' | " +
                            chat(server.port(), "--temp 0 --max 30 --system 'Be kind.'"), &out), 0);
  EXPECT_EQ(out, expected);
}

// --template server asked for explicitly: exit 3 with what to do instead.
TEST(ChatOneShot, WithoutAServerTemplateItSaysWhatToDo) {
  ServerProcess server;  // stories260K: no chat template
  ASSERT_TRUE(server.started()) << server.log();
  std::string out;
  EXPECT_EQ(run_capture(chat(server.port(), "--template server --prompt hi 2>&1"), &out), 3);
  EXPECT_NE(out.find("--chat-template"), std::string::npos) << out;
  EXPECT_NE(out.find("--template plain"), std::string::npos) << out;
}

// The newcomer's path: the server as scripts/run.sh starts it (the default model, no flags), then
// plain `flashserve-chat`: it falls back to the plain format, says so on stderr, and replies
// exactly what --template plain replies.
TEST(ChatOneShot, DefaultModelChatsOutOfTheBox) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  std::string plain, fallback, note;
  ASSERT_EQ(run_capture(chat(server.port(), "--template plain --temp 0 --max 30 --prompt 'Hi'"),
                        &plain), 0);
  EXPECT_FALSE(plain.empty());
  EXPECT_EQ(run_capture(chat(server.port(), "--temp 0 --max 30 --prompt 'Hi' 2>/dev/null"),
                        &fallback), 0);
  EXPECT_EQ(fallback, plain);
  EXPECT_EQ(run_capture(chat(server.port(), "--temp 0 --max 1 --prompt 'Hi' 2>&1 >/dev/null"),
                        &note), 0);
  EXPECT_NE(note.find("plain prompt format"), std::string::npos) << note;
}

TEST(ChatOneShot, PlainTemplateGivesTheGreedyCompletion) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  nlohmann::json r = complete(server.port(), {{"prompt", "User: Where is the dog?\nAssistant:"},
                                              {"max_tokens", 30},
                                              {"temperature", 0},
                                              {"stop", {"\nUser:"}}});
  std::string expected = r["choices"][0]["text"];
  expected = expected.substr(expected.find_first_not_of(" \n")) + "\n";

  std::string out;
  EXPECT_EQ(run_capture("printf 'Where is the dog?\\n' | " +
                            chat(server.port(), "--template plain --temp 0 --max 30"), &out), 0);
  EXPECT_EQ(out, expected);
  // --prompt is the same one-shot mode.
  EXPECT_EQ(run_capture(chat(server.port(),
                             "--template plain --temp 0 --max 30 --prompt 'Where is the dog?' </dev/null"),
                        &out), 0);
  EXPECT_EQ(out, expected);
}

TEST(ChatOneShot, ErrorsHaveTheirExitCodes) {
  std::string out;
  EXPECT_EQ(run_capture(chat(unused_port(), "--prompt hi 2>&1"), &out), 1);
  EXPECT_NE(out.find("cannot connect"), std::string::npos) << out;

  ServerProcess server({"--api-key", "sekret-key", "--chat-template", "chatml"});
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  EXPECT_EQ(run_capture("echo hi | " + chat(port, "--api-key wrong 2>&1"), &out), 4);
  EXPECT_NE(out.find("rejected the API key"), std::string::npos) << out;
  EXPECT_EQ(run_capture("echo hi | " + chat(port, "2>&1"), &out), 4);  // no key at all
  EXPECT_NE(out.find("401"), std::string::npos) << out;
  EXPECT_EQ(run_capture("echo hi | FLASHSERVE_API_KEY=sekret-key " + chat(port, "--max 5").substr(
                            std::string("env -u FLASHSERVE_API_KEY ").size()), &out), 0);
  EXPECT_FALSE(out.empty());

  // A message far beyond the 512-token context: the server's 400, reported, exit 3.
  std::string big;
  while (big.size() < 6000) big += "cat ";
  EXPECT_EQ(run_capture("echo " + shell_quote(big) + " | " + chat(port, "--api-key sekret-key 2>&1"), &out), 3);
  EXPECT_NE(out.find("does not fit the model's context"), std::string::npos) << out;

  EXPECT_EQ(run_capture(chat(port, "--template nope 2>&1"), &out), 2);
  EXPECT_NE(out.find("must be server, plain, llama2, chatml or zephyr"), std::string::npos) << out;
  EXPECT_EQ(run_capture(chat(port, "--url notaurl --prompt hi 2>&1"), &out), 2);
  EXPECT_EQ(run_capture("echo | " + chat(port, "--api-key sekret-key 2>&1"), &out), 2);  // empty
  EXPECT_EQ(run_capture(chat(port, "--help"), &out), 0);
  EXPECT_NE(out.find("Exit status"), std::string::npos) << out;
}

}  // namespace
}  // namespace flashserve::testing
