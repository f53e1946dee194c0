// The server with --speculative ngram, and with stories260K as its own draft model: every
// request gives the same answer with speculation on and with "speculative": false (greedy with
// stop strings, seeded sampling with n = 3 and logprobs, streaming, a guided regex and choice),
// /metrics counts the drafts; without --speculative, "speculative": true is a 400; bad
// speculation flags are usage errors (exit 2); a draft model of another vocabulary fails
// start-up (exit 1) naming the difference.
#include <gtest/gtest.h>

#include <string>

#include "tests/common/temp_dir.h"
#include "tests/model/moe_test_util.h"
#include "tests/server/server_process.h"
#include "weights/random_model.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

// The answer's choices without what differs between two runs (ids, timings).
json choices(const json& r) {
  json c = r["choices"];
  for (json& x : c) x.erase("index");
  return c;
}

// Each request with speculation and with "speculative": false gives the same choices, streamed
// or not; `method`'s draft counter then shows that drafts were verified.
void expect_same_answers(ServerProcess& server, const std::string& method) {
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  const std::vector<json> bodies = {
      {{"prompt", "Once upon a time, there was a little girl. Once upon a time"},
       {"max_tokens", 60}, {"temperature", 0}, {"stop", {"park", "."}}},
      {{"prompt", "The cat sat on the mat. The cat"}, {"max_tokens", 50}, {"temperature", 1.0},
       {"seed", 11}, {"n", 3}, {"logprobs", 2}, {"presence_penalty", 0.5}},
      {{"prompt", "Tom and Sam went to the park."}, {"max_tokens", 40}, {"temperature", 0.7},
       {"top_p", 0.9}, {"seed", 5}, {"ignore_eos", true}},
      {{"prompt", "x"}, {"guided_regex", "[0-9]{3}-[a-c]+"}, {"max_tokens", 30}, {"seed", 1}},
      {{"prompt", "Lily liked"}, {"guided_choice", {"red apples", "red and blue balls"}},
       {"max_tokens", 30}, {"temperature", 0}},
  };
  for (const json& body : bodies) {
    SCOPED_TRACE(body.dump());
    int on_status = 0, off_status = 0;
    json off_body = body;
    off_body["speculative"] = false;
    const json on = complete(port, body, &on_status);
    const json off = complete(port, off_body, &off_status);
    ASSERT_EQ(on_status, 200) << on.dump();
    ASSERT_EQ(off_status, 200) << off.dump();
    EXPECT_EQ(choices(on), choices(off));
    EXPECT_FALSE(choices(on)[0]["text"].get<std::string>().empty());
    json stream_body = body;
    stream_body["stream"] = true;
    if (!body.contains("n")) {
      const StreamResult s = stream_completion(port, stream_body);
      EXPECT_EQ(s.status, 200);
      EXPECT_EQ(s.text, on["choices"][0]["text"].get<std::string>());
      EXPECT_EQ(s.finish_reason, on["choices"][0]["finish_reason"].get<std::string>());
    }
  }
  const double drafts = metric(port, "flashserve_spec_draft_tokens_total");
  EXPECT_GT(drafts, 0);
  EXPECT_GE(metric(port, "flashserve_spec_accepted_tokens_total"), 0);
  EXPECT_GE(metric(port, "flashserve_spec_mean_accepted_length"), 1);
  const std::string m = http::request(port, "GET", "/metrics").body;
  EXPECT_NE(m.find("flashserve_spec_draft_tokens_total{method=\"" + method + "\"}"),
            std::string::npos) << m;
  EXPECT_EQ(server.stop(), 0) << server.log();
  EXPECT_NE(server.log().find("speculative decoding " + method + ", up to 5 draft tokens"),
            std::string::npos) << server.log();
}

TEST(ServerSpeculative, NgramSameAnswersOnAndOff) {
  ServerProcess server({"--speculative", "ngram", "--num-speculative-tokens", "5",
                        "--ngram-min", "1", "--ngram-max", "3", "--speculative-policy", "always"});
  expect_same_answers(server, "ngram");
}

TEST(ServerSpeculative, DraftModelSameAnswersOnAndOff) {
  // stories260K drafting for itself.
  ServerProcess server({"--speculative", "draft", "--draft-model", model_dir(),
                        "--num-speculative-tokens", "5", "--draft-kv-cache-tokens", "4096"});
  expect_same_answers(server, "draft");
}

TEST(ServerSpeculative, DraftModelOfAnotherVocabularyFailsStartUp) {
  ModelConfig c = test::moe_base("LlamaForCausalLM", 1);  // a vocabulary of 320
  c.moe = {};
  const std::string dir = test::fresh_dir("draft");
  write_random_hf_model(dir, c, 1, DType::kF32);
  ServerProcess server({"--speculative", "draft", "--draft-model", dir});
  EXPECT_FALSE(server.started());
  EXPECT_EQ(server.stop(), 1) << server.log();
  EXPECT_NE(server.log().find("vocabulary has 320 tokens, the target's 512"), std::string::npos)
      << server.log();
}

TEST(ServerSpeculative, RequestForItWithoutItIsA400) {
  ServerProcess server;
  ASSERT_TRUE(server.started()) << server.log();
  int status = 0;
  json r = complete(server.port(), {{"prompt", "Hi"}, {"max_tokens", 4}, {"speculative", true}},
                    &status);
  EXPECT_EQ(status, 400) << r.dump();
  EXPECT_EQ(r["error"]["param"], "speculative") << r.dump();
  r = complete(server.port(), {{"prompt", "Hi"}, {"max_tokens", 4}, {"speculative", "yes"}},
               &status);
  EXPECT_EQ(status, 400) << r.dump();
  r = complete(server.port(), {{"prompt", "Hi"}, {"max_tokens", 4}, {"speculative", false}},
               &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(metric(server.port(), "flashserve_spec_draft_tokens_total"), -1);
}

TEST(ServerSpeculative, BadFlagsAreUsageErrors) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--speculative", "ngram", "--num-speculative-tokens", "0"},
        {"--speculative", "ngram", "--num-speculative-tokens", "17"},
        {"--speculative", "eagle"},
        {"--speculative", "ngram", "--ngram-min", "4", "--ngram-max", "2"},
        {"--speculative", "draft"},
        {"--draft-model", model_dir()}}) {
    ServerProcess server(args);
    EXPECT_FALSE(server.started()) << args[1];
    EXPECT_EQ(server.stop(), 2) << server.log();
  }
}

}  // namespace
}  // namespace flashserve::testing
