// End-to-end tests of the real `flashserve` binary (label server): greedy text equals
// flashserve-generate's, streamed == non-streamed (stops spanning tokens, multi-byte text),
// seeded sampling independent of concurrent load, recompute preemption with a tiny KV cache.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "tests/server/server_process.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

class ServerE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess(); }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << "SIGTERM must exit 0\n" << server_->log();
    delete server_;
  }
  void SetUp() override { ASSERT_TRUE(server_->started()) << server_->log(); }
  int port() const { return server_->port(); }
  static ServerProcess* server_;
};
ServerProcess* ServerE2E::server_ = nullptr;

std::string run_generate(const std::string& prompt, int max_tokens) {
  std::string cmd = std::string(FS_BINARY_DIR);
  cmd.append("/tools/flashserve-generate --model '").append(model_dir());
  cmd.append("' --temperature 0 --threads 1 --max-tokens ").append(std::to_string(max_tokens));
  cmd.append(" --prompt '").append(prompt).append("' 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while (p && (n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  if (p) {
    EXPECT_EQ(pclose(p), 0) << cmd;
  }
  return out;
}

TEST_F(ServerE2E, GreedyMatchesFlashserveGenerate) {
  for (std::string prompt : {"Once upon a time", "The little dog", "Lily saw a \xF0\x9F\x98\x80 and"}) {
    int status = 0;
    json r = complete(port(), {{"prompt", prompt}, {"max_tokens", 120}, {"temperature", 0}}, &status);
    ASSERT_EQ(status, 200) << r.dump();
    std::string text = r["choices"][0]["text"];
    EXPECT_EQ(run_generate(prompt, 120), prompt + text + "\n") << prompt;
    EXPECT_EQ(r["object"], "text_completion");
    EXPECT_GT(r["usage"]["completion_tokens"].get<int>(), 0);
    EXPECT_EQ(r["usage"]["total_tokens"].get<int>(),
              r["usage"]["prompt_tokens"].get<int>() + r["usage"]["completion_tokens"].get<int>());
  }
}

TEST_F(ServerE2E, StreamEqualsNonStream) {
  for (int seed = 0; seed < 6; ++seed) {
    json body = {{"prompt", "Once upon a time"}, {"max_tokens", 20 + 30 * seed},
                 {"temperature", seed == 0 ? 0.0 : 1.0}, {"seed", seed}};
    json whole = complete(port(), body);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    StreamResult s = stream_completion(port(), body);
    ASSERT_EQ(s.status, 200);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, whole["choices"][0]["text"].get<std::string>()) << "seed " << seed;
    EXPECT_EQ(s.finish_reason, whole["choices"][0]["finish_reason"].get<std::string>());
    ASSERT_GE(s.chunks.size(), 2u);
    const json& usage = s.chunks.back();  // the usage chunk comes last, with no choices
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"], whole["usage"]);
    for (size_t i = 0; i + 1 < s.chunks.size(); ++i) {
      EXPECT_EQ(s.chunks[i]["object"], "text_completion");
      EXPECT_EQ(s.chunks[i]["id"], s.chunks[0]["id"]);
      bool last = i + 2 == s.chunks.size();
      EXPECT_EQ(s.chunks[i]["choices"][0]["finish_reason"].is_null(), !last);
    }
  }
}

TEST_F(ServerE2E, StopStringsSpanningTokens) {
  json base = {{"prompt", "Once upon a time"}, {"max_tokens", 100}, {"temperature", 0},
               {"logprobs", 0}};
  json r = complete(port(), base);
  const std::string text = r["choices"][0]["text"];
  const json& offsets = r["choices"][0]["logprobs"]["text_offset"];
  ASSERT_GT(offsets.size(), 20u);
  for (size_t k : {size_t(5), size_t(11), size_t(17)}) {
    for (size_t len : {size_t(3), size_t(9)}) {  // across one token boundary, or several
      size_t at = offsets[k].get<size_t>() - 1;
      std::string stop = text.substr(at, len);
      std::string expected = text.substr(0, text.find(stop));
      json body = base;
      body.erase("logprobs");
      body["stop"] = json::array({"zzzz", stop});
      json s = complete(port(), body);
      EXPECT_EQ(s["choices"][0]["text"], expected) << "stop '" << stop << "'";
      EXPECT_EQ(s["choices"][0]["finish_reason"], "stop");
      body["stream"] = true;
      StreamResult st = stream_completion(port(), body);
      EXPECT_EQ(st.text, expected) << "stop '" << stop << "'";
      EXPECT_EQ(st.finish_reason, "stop");
    }
  }
}

TEST_F(ServerE2E, MultiByteTextStreamsIntact) {
  // Push the model towards the byte-fallback pieces <0xE2> <0x82> <0xAC> (tokens 3 + byte in
  // the llama2.c tokenizers; their raw logprobs are about -21, -24, -28): the output mixes
  // whole 3-byte characters (E2 82 AC = "€", E2 AC AC = "⬬", ...) with invalid runs (U+FFFD).
  json bias = {{"229", 21}, {"133", 24}, {"175", 28}};
  int with_char = 0;
  for (int seed = 0; seed < 8; ++seed) {
    json body = {{"prompt", "Lily said \xE2\x82\xAC"}, {"max_tokens", 60}, {"temperature", 1},
                 {"seed", seed}, {"logit_bias", bias}};
    json whole = complete(port(), body);
    std::string text = whole["choices"][0]["text"];
    body["stream"] = true;
    StreamResult s = stream_completion(port(), body);
    EXPECT_EQ(s.text, text) << "seed " << seed;
    // A whole 3-byte character E2 xx xx other than U+FFFD (EF BF BD): use it as a stop string,
    // its bytes coming from three separate tokens.
    size_t at = std::string::npos;
    for (size_t i = 0; i + 2 < text.size() && at == std::string::npos; ++i) {
      auto cont = [&](size_t k) { return (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80; };
      if (static_cast<unsigned char>(text[i]) == 0xE2 && cont(i + 1) && cont(i + 2)) at = i;
    }
    if (at == std::string::npos) continue;
    ++with_char;
    json stopped = body;
    stopped["stop"] = text.substr(at, 3);
    const std::string expected = text.substr(0, at);
    StreamResult ss = stream_completion(port(), stopped);
    EXPECT_EQ(ss.text, expected) << "seed " << seed;
    EXPECT_EQ(ss.finish_reason, "stop");
    stopped["stream"] = false;
    EXPECT_EQ(complete(port(), stopped)["choices"][0]["text"], expected) << "seed " << seed;
  }
  EXPECT_GE(with_char, 3) << "too few multi-byte characters were generated to prove anything";
}

TEST_F(ServerE2E, EchoAndLogprobs) {
  json r = complete(port(), {{"prompt", "Once upon"}, {"max_tokens", 5}, {"temperature", 0},
                             {"echo", true}, {"logprobs", 2}});
  const json& c = r["choices"][0];
  std::string text = c["text"];
  EXPECT_EQ(text.rfind("Once upon", 0), 0u) << text;
  const json& lp = c["logprobs"];
  const int prompt_tokens = r["usage"]["prompt_tokens"];
  ASSERT_EQ(lp["tokens"].size(), size_t(prompt_tokens + 5));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // the first prompt token has none
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < lp["tokens"].size(); ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_GE(lp["text_offset"][i].get<size_t>(), lp["text_offset"][i - 1].get<size_t>());
  }
  // Greedy: each generated token is its position's top choice.
  for (int i = prompt_tokens; i < prompt_tokens + 5; ++i) {
    double best = -1e9;
    for (auto& [k, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), best, 1e-4);
  }
  // n and prompt lists number the choices.
  json m = complete(port(), {{"prompt", json::array({"A", "B"})}, {"n", 2}, {"max_tokens", 3}});
  ASSERT_EQ(m["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m["choices"][i]["index"], i);
  // max_tokens 0 with echo returns the prompt.
  json z = complete(port(), {{"prompt", "Hello"}, {"max_tokens", 0}, {"echo", true}});
  EXPECT_EQ(z["choices"][0]["text"], "Hello");
  EXPECT_EQ(z["choices"][0]["finish_reason"], "length");
}

// usage.prompt_tokens counts each prompt once, not once per choice: n 2 reports what n 1 does.
TEST_F(ServerE2E, UsageCountsEachPromptOnce) {
  json one = complete(port(), {{"prompt", "Once upon a time"}, {"max_tokens", 4}});
  const int p = one["usage"]["prompt_tokens"];
  ASSERT_GT(p, 1);
  json two = complete(port(), {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"n", 2},
                               {"ignore_eos", true}});
  ASSERT_EQ(two["choices"].size(), 2u);
  EXPECT_EQ(two["usage"]["prompt_tokens"], p);
  EXPECT_EQ(two["usage"]["completion_tokens"], 8);
  EXPECT_EQ(two["usage"]["total_tokens"], p + 8);
  json list = complete(port(), {{"prompt", json::array({"Once upon a time", "Once upon a time"})},
                                {"max_tokens", 1}, {"n", 2}});
  EXPECT_EQ(list["usage"]["prompt_tokens"], 2 * p);  // a list: the sum, once per prompt
  StreamResult s = stream_completion(port(), {{"prompt", "Once upon a time"}, {"max_tokens", 4},
                                              {"n", 2}, {"ignore_eos", true}, {"stream", true},
                                              {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200);
  ASSERT_FALSE(s.chunks.empty());
  const json& usage = s.chunks.back()["usage"];
  EXPECT_EQ(usage["prompt_tokens"], p);
  EXPECT_EQ(usage["completion_tokens"], 8);
}

// echo + logprobs + max_tokens 0 with a prompt of exactly max_model_len (512) token ids: the API
// edge accepts it (512 + 0 fits), so the engine must too (a refusal there would be a 500).
TEST_F(ServerE2E, PromptFillingTheContextWithEchoLogprobs) {
  json models = json::parse(http::request(port(), "GET", "/v1/models").body);
  const int max_model_len = models["data"][0]["max_model_len"];
  ASSERT_EQ(max_model_len, 512);
  std::vector<int> ids = {1};
  for (int i = 1; i < max_model_len; ++i) ids.push_back(3 + (i * 37) % 500);
  json body = {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}};
  int status = 0;
  json r = complete(port(), body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  const json& c = r["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  ASSERT_EQ(c["logprobs"]["tokens"].size(), size_t(max_model_len));
  EXPECT_TRUE(c["logprobs"]["token_logprobs"][0].is_null());
  EXPECT_LE(c["logprobs"]["token_logprobs"][max_model_len - 1].get<double>(), 0.0);
  EXPECT_EQ(r["usage"]["prompt_tokens"], max_model_len);
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  body["stream"] = true;
  StreamResult s = stream_completion(port(), body);
  EXPECT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text, c["text"].get<std::string>());
  EXPECT_EQ(s.finish_reason, "length");
  // One token more than the context (or any generation) is still the client's 400.
  body["stream"] = false;
  body["max_tokens"] = 1;
  complete(port(), body, &status);
  EXPECT_EQ(status, 400);
  body["max_tokens"] = 0;
  ids.push_back(5);
  body["prompt"] = ids;
  complete(port(), body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(wait_metric(port(), "flashserve_kv_blocks_used", 0, std::chrono::seconds(2)), 0);
}

TEST_F(ServerE2E, SeededTextIndependentOfConcurrentLoad) {
  json seeded = {{"prompt", "The cat"}, {"max_tokens", 100}, {"temperature", 0.9},
                 {"top_p", 0.95}, {"seed", 4242}, {"ignore_eos", true}};
  const std::string alone = complete(port(), seeded)["choices"][0]["text"];
  std::vector<std::string> texts(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      json body = i == 7 ? seeded
                         : json{{"prompt", std::string(1 + i * 5, 'a') + " once"},
                                {"max_tokens", 10 + 23 * i}, {"temperature", 1}, {"seed", i}};
      if (i % 3 == 0 && i != 7) {
        body["stream"] = true;
        texts[i] = stream_completion(port(), body).text;
      } else {
        texts[i] = complete(port(), body)["choices"][0]["text"];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(texts[7], alone);
  EXPECT_EQ(wait_metric(port(), "flashserve_kv_blocks_used", 0, std::chrono::seconds(2)), 0);
}

TEST(ServerKvPressure, PreemptedGreedyEqualsUnpreempted) {
  const std::vector<std::string> prompts = {"Once upon a time", "The dog", "Tom and Sue",
                                            "A big red ball", "One day", "The sun was",
                                            "She liked", "Bob had a"};
  auto run_all = [&](int port) {
    std::vector<std::string> out(prompts.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i) {
      threads.emplace_back([&, i] {
        json body = {{"prompt", prompts[i]}, {"max_tokens", 70}, {"temperature", 0},
                     {"ignore_eos", true}};
        out[i] = complete(port, body)["choices"][0]["text"];
      });
    }
    for (auto& t : threads) t.join();
    return out;
  };
  std::vector<std::string> reference;
  {
    ServerProcess big;
    ASSERT_TRUE(big.started()) << big.log();
    for (const auto& p : prompts) {
      reference.push_back(complete(big.port(), {{"prompt", p}, {"max_tokens", 70},
                                                {"temperature", 0}, {"ignore_eos", true}})
                              ["choices"][0]["text"]);
    }
  }
  // 8 requests x ~76 tokens need ~40 blocks of 16; the cache has 10.
  ServerProcess small({"--kv-cache-tokens", "160", "--block-size", "16"});
  ASSERT_TRUE(small.started()) << small.log();
  EXPECT_EQ(metric(small.port(), "flashserve_kv_blocks_total"), 10);
  std::vector<std::string> got = run_all(small.port());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], reference[i]) << prompts[i];
  EXPECT_GT(metric(small.port(), "flashserve_preemptions_total"), 0);
  EXPECT_EQ(wait_metric(small.port(), "flashserve_kv_blocks_used", 0, std::chrono::seconds(2)), 0);
  // A request that can never fit the cache is refused up front (400, not a 500).
  int status = 0;
  complete(small.port(), {{"prompt", "Hi"}, {"max_tokens", 300}}, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(small.stop(), 0);
}

}  // namespace
}  // namespace flashserve::testing
