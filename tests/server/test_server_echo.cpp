// echo + logprobs on the real binary: the logprobs tokens join, byte for byte, to the choice's
// text and each text_offset points at its token in that text, for prompts given as text and as
// token ids (with and without BOS), with and without generated tokens, streamed or not: BOS
// is spelled "" (not "<s>") and the first piece drops SentencePiece's leading space.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

struct Spelled {
  std::string text;
  std::vector<std::string> tokens;
  std::vector<size_t> offsets;
};

Spelled non_streamed(int port, const json& body) {
  int status = 0;
  json r = complete(port, body, &status);
  EXPECT_EQ(status, 200) << r.dump();
  Spelled s;
  const json& c = r["choices"][0];
  s.text = c["text"];
  for (const auto& t : c["logprobs"]["tokens"]) s.tokens.push_back(t);
  for (const auto& o : c["logprobs"]["text_offset"]) s.offsets.push_back(o);
  return s;
}

Spelled streamed(int port, json body) {
  body["stream"] = true;
  StreamResult r = stream_completion(port, body);
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.done);
  Spelled s;
  s.text = r.text;
  for (const auto& chunk : r.chunks) {
    if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
    const json& lp = chunk["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    for (const auto& t : lp["tokens"]) s.tokens.push_back(t);
    for (const auto& o : lp["text_offset"]) s.offsets.push_back(o);
  }
  return s;
}

// The tokens spell the text exactly and each offset is where its token starts.
void expect_spelled(const Spelled& s, const std::string& what) {
  ASSERT_EQ(s.tokens.size(), s.offsets.size()) << what;
  std::string joined;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    EXPECT_NE(s.tokens[i].rfind("bytes:", 0), 0u) << what << ": a byte piece, pick another prompt";
    EXPECT_EQ(s.offsets[i], joined.size()) << what << ": token " << i << " '" << s.tokens[i] << "'";
    EXPECT_EQ(s.text.compare(s.offsets[i], s.tokens[i].size(), s.tokens[i]), 0)
        << what << ": text_offset " << s.offsets[i] << " does not index '" << s.tokens[i] << "'";
    joined += s.tokens[i];
  }
  EXPECT_EQ(joined, s.text) << what;
}

TEST(ServerEcho, LogprobsTokensSpellTheEchoedText) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  struct Case {
    std::string name;
    json prompt;
    size_t prompt_tokens;  // 0: not known here (a text prompt)
    std::string echo;      // a text prompt: how the echoed text starts
  };
  // stories260K's tokenizer drops leading whitespace, so the model never sees it: with logprobs
  // the echo is the prompt as the tokens spell it (docs/SERVER.md, echo).
  const std::vector<Case> cases = {
      {"text", "Once upon a time", 0, "Once upon a time"},
      {"text with a leading space", " Once upon a time", 0, "Once upon a time"},
      {"ids with BOS", json::array({1, 300, 350, 400, 450}), 5, ""},
      {"ids without BOS", json::array({300, 350, 400, 450}), 4, ""},
  };
  for (const Case& c : cases) {
    for (int max_tokens : {0, 6}) {
      const json body = {{"prompt", c.prompt}, {"max_tokens", max_tokens}, {"temperature", 0},
                         {"echo", true}, {"logprobs", 1}};
      const std::string what = c.name + ", max_tokens " + std::to_string(max_tokens);
      const Spelled s = non_streamed(port, body);
      expect_spelled(s, what);
      if (c.prompt.is_string()) {
        EXPECT_EQ(s.text.rfind(c.echo, 0), 0u) << what << ": " << s.text;
      } else {
        EXPECT_EQ(s.tokens.size(), c.prompt_tokens + max_tokens) << what;
      }
      if (c.prompt.is_array() && c.prompt[0] == 1) EXPECT_EQ(s.tokens[0], "") << "BOS spells nothing";
      const Spelled t = streamed(port, body);
      expect_spelled(t, what + ", streamed");
      EXPECT_EQ(t.text, s.text) << what;
      EXPECT_EQ(t.tokens, s.tokens) << what;
    }
  }
  EXPECT_EQ(server.stop(), 0) << server.log();
}

}  // namespace
}  // namespace flashserve::testing
