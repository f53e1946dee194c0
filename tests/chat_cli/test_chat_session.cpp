// The chat client's pure logic: history trimming against the context budget (and the usage
// calibration of the token estimate), slash commands, the SSE parser and base-URL parsing.
#include <random>

#include <gtest/gtest.h>

#include "chat_cli/chat_session.h"
#include "chat_cli/http_stream.h"

namespace flashserve::chat {
namespace {

SessionOptions opts(int max_model_len, int max_tokens) {
  SessionOptions o;
  o.max_model_len = max_model_len;
  o.max_tokens = max_tokens;
  return o;
}

TEST(ChatSession, EstimateIsConservative) {
  ChatSession s(opts(512, 100));
  EXPECT_EQ(s.bytes_per_token(), 2.0);
  EXPECT_EQ(s.estimate_tokens(""), 1);  // BOS
  EXPECT_EQ(s.estimate_tokens("abc"), 3);
  EXPECT_EQ(s.estimate_tokens(std::string(100, 'a')), 51);
  EXPECT_EQ(s.prompt_budget(), 412);
}

TEST(ChatSession, KeepsEverythingThatFits) {
  ChatSession s(opts(512, 100));
  s.commit("Hi", "Hello!");
  s.commit("How are you?", "Fine.");
  PreparedPrompt p = s.prepare("Bye");
  EXPECT_EQ(p.dropped_turns, 0);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.prompt, render_prompt(TemplateKind::kPlain, "", s.history(), "Bye"));
  EXPECT_EQ(s.history().size(), 2u);
  // The default sends the conversation as chat messages for the server's template.
  EXPECT_EQ(s.options().kind, TemplateKind::kServer);
  EXPECT_EQ(p.messages, nlohmann::json::parse(R"([{"role":"user","content":"Hi"},
      {"role":"assistant","content":"Hello!"},{"role":"user","content":"How are you?"},
      {"role":"assistant","content":"Fine."},{"role":"user","content":"Bye"}])"));
  s.handle_command("/system Be brief.");
  EXPECT_EQ(s.prepare("x").messages, nlohmann::json::parse(R"([{"role":"system","content":"Be brief."},
      {"role":"user","content":"x"}])"));
}

// Random conversations: after prepare() the estimate fits the budget, the kept turns are the
// newest ones in order, and only as many were dropped as needed (one more would have fit... the
// one before the first kept one would not).
TEST(ChatSession, DropsOldestTurnsUntilTheEstimateFits) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    const int max_len = 64 + static_cast<int>(rng() % 1000);
    const int max_tokens = 1 + static_cast<int>(rng() % (max_len / 2));
    SessionOptions o = opts(max_len, max_tokens);
    o.kind = static_cast<TemplateKind>(rng() % 4);
    if (rng() % 2) o.system = std::string(rng() % 80, 's');
    ChatSession s(o);
    std::vector<Turn> all;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      Turn t;  // built by appends: GCC 12 warns falsely (-Wrestrict) on "x" + to_string + string
      t.user.append("u").append(std::to_string(i)).append(rng() % 300, 'u');
      t.assistant.append("a").append(std::to_string(i)).append(rng() % 300, 'a');
      all.push_back(t);
      s.commit(t.user, t.assistant);
    }
    std::string user = "now";
    user.append(rng() % 200, 'n');
    PreparedPrompt p = s.prepare(user);
    const auto& kept = s.history();
    ASSERT_EQ(static_cast<int>(kept.size()) + p.dropped_turns, n);
    for (size_t i = 0; i < kept.size(); ++i) {
      EXPECT_EQ(kept[i].user, all[n - kept.size() + i].user);
    }
    EXPECT_EQ(p.prompt, render_prompt(o.kind, o.system, kept, user));
    EXPECT_EQ(p.estimated_tokens, s.estimate_tokens(p.prompt));
    if (p.fits) {
      EXPECT_LE(p.estimated_tokens, s.prompt_budget());
    } else {
      EXPECT_TRUE(kept.empty());
      EXPECT_GT(p.estimated_tokens, s.prompt_budget());
    }
    if (p.dropped_turns > 0) {  // keeping one more turn would not have fit
      std::vector<Turn> one_more(all.end() - kept.size() - 1, all.end());
      EXPECT_GT(s.estimate_tokens(render_prompt(o.kind, o.system, one_more, user)),
                s.prompt_budget());
    }
  }
}

TEST(ChatSession, UnknownContextSendsEverything) {
  ChatSession s(opts(0, 100));
  for (int i = 0; i < 50; ++i) s.commit(std::string(500, 'u'), std::string(500, 'a'));
  PreparedPrompt p = s.prepare("x");
  EXPECT_EQ(p.dropped_turns, 0);
  EXPECT_EQ(s.history().size(), 50u);
  // ...and the server's 400 makes the client drop the oldest turns one at a time.
  EXPECT_TRUE(s.drop_oldest());
  EXPECT_EQ(s.history().size(), 49u);
  ChatSession empty(opts(0, 100));
  EXPECT_FALSE(empty.drop_oldest());
}

TEST(ChatSession, UsageCalibratesTheEstimateWithAMargin) {
  ChatSession s(opts(512, 100));
  s.observe_usage(451, 101);  // 4.51 bytes per token observed
  EXPECT_NEAR(s.bytes_per_token(), 4.51 * 0.85, 1e-9);
  s.observe_usage(100, 101);  // byte-fallback text: 1 byte per token -> floor 1
  EXPECT_EQ(s.bytes_per_token(), 1.0);
  s.observe_usage(10000, 11);  // absurd ratios are capped at 4
  EXPECT_EQ(s.bytes_per_token(), 4.0);
  s.observe_usage(100, 1);  // BOS only: ignored
  EXPECT_EQ(s.bytes_per_token(), 4.0);
}

TEST(ChatSession, Commands) {
  ChatSession s(opts(512, 100));
  s.commit("a", "b");
  EXPECT_EQ(s.handle_command("hello").action, CommandAction::kNone);
  EXPECT_EQ(s.handle_command("  /quit ").action, CommandAction::kQuit);
  EXPECT_EQ(s.handle_command("/exit").action, CommandAction::kQuit);

  CommandResult r = s.handle_command("/temp 0.25");
  EXPECT_EQ(r.action, CommandAction::kHandled);
  EXPECT_FALSE(r.error);
  EXPECT_EQ(s.options().temperature, 0.25);
  for (const char* bad : {"/temp", "/temp -1", "/temp 2.5", "/temp abc", "/temp 1x", "/temp nan"}) {
    r = s.handle_command(bad);
    EXPECT_TRUE(r.error) << bad;
    EXPECT_EQ(s.options().temperature, 0.25) << bad;
  }

  r = s.handle_command("/max 64");
  EXPECT_FALSE(r.error);
  EXPECT_EQ(s.options().max_tokens, 64);
  EXPECT_EQ(s.prompt_budget(), 512 - 64);
  for (const char* bad : {"/max", "/max 0", "/max -3", "/max 512", "/max 9999", "/max 1.5"}) {
    EXPECT_TRUE(s.handle_command(bad).error) << bad;
    EXPECT_EQ(s.options().max_tokens, 64) << bad;
  }

  EXPECT_EQ(s.history().size(), 1u);
  r = s.handle_command("/system You are terse.");
  EXPECT_EQ(s.options().system, "You are terse.");
  EXPECT_TRUE(s.history().empty());
  s.commit("a", "b");
  s.handle_command("/reset");
  EXPECT_TRUE(s.history().empty());
  EXPECT_EQ(s.options().system, "You are terse.");  // /reset keeps the system prompt
  s.handle_command("/system");
  EXPECT_EQ(s.options().system, "");

  r = s.handle_command("/help");
  EXPECT_NE(r.message.find("/temp X"), std::string::npos);
  r = s.handle_command("/nope");
  EXPECT_TRUE(r.error);
  EXPECT_NE(r.message.find("/nope"), std::string::npos);
}

TEST(SseParser, EventsAcrossArbitraryChunks) {
  const std::string stream =
      "data: {\"a\":1}\n\n"
      ": a comment\n"
      "event: message\r\ndata: two\r\ndata: lines\r\n\r\n"
      "id: 3\rdata:no-space\r\r"
      "data: [DONE]\n\n"
      "data: unfinished";
  const std::vector<std::string> want = {"{\"a\":1}", "two\nlines", "no-space", "[DONE]"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {  // every split of the bytes gives the same events
    SseParser p;
    std::vector<std::string> got;
    size_t pos = 0;
    while (pos < stream.size()) {
      size_t n = trial == 0 ? 1 : 1 + rng() % 20;
      for (auto& d : p.feed(stream.substr(pos, n))) got.push_back(d);
      pos += n;
    }
    EXPECT_EQ(got, want) << "trial " << trial;
  }
}

TEST(BaseUrl, Parses) {
  auto u = parse_base_url("http://127.0.0.1:8000");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme_host_port, "http://127.0.0.1:8000");
  EXPECT_EQ(u->path_prefix, "");
  u = parse_base_url("https://example.org/api/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme_host_port, "https://example.org");
  EXPECT_EQ(u->path_prefix, "/api");
  u = parse_base_url("http://localhost:8000/");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->path_prefix, "");
  for (const char* bad : {"", "127.0.0.1:8000", "ftp://x", "http://", "http://:80",
                          "http://host:", "http://host:80x", "http://host:1234567"}) {
    EXPECT_FALSE(parse_base_url(bad)) << bad;
  }
}

TEST(ErrorBody, ReadsTheEnvelope) {
  std::string msg, code;
  parse_error_body(R"({"error":{"message":"too long","type":"invalid_request_error",)"
                   R"("param":"max_tokens","code":"context_length_exceeded"}})", 400, &msg, &code);
  EXPECT_EQ(msg, "too long");
  EXPECT_EQ(code, "context_length_exceeded");
  msg.clear();
  code.clear();
  parse_error_body("<html>bad gateway</html>", 502, &msg, &code);
  EXPECT_EQ(msg, "HTTP 502: <html>bad gateway</html>");
  EXPECT_EQ(code, "");
}

}  // namespace
}  // namespace flashserve::chat
