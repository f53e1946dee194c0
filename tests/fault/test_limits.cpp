// Security limits at the API edge (label unit): the constant-time key comparison, and the caps
// on stop strings (count and length), n, max_tokens and prompt length; `model` is only compared
// with the served name, never used as a path. Regression test for the stop-length limit
// (docs/RELIABILITY.md, bug 2) and for refusing hopeless prompts unencoded (bug 3).
#include <gtest/gtest.h>

#include "server/api/openai_api.h"
#include "server/endpoints/completions_request.h"
#include "server/http/constant_time.h"
#include "tests/server/fake_tokenizer.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;

TEST(ConstantTime, ComparesExactly) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("sk-abc123", "sk-abc123"));
  EXPECT_FALSE(constant_time_equal("sk-abc123", "sk-abc124"));  // last byte
  EXPECT_FALSE(constant_time_equal("sk-abc123", "tk-abc123"));  // first byte
  EXPECT_FALSE(constant_time_equal("sk-abc123", "sk-abc12"));   // prefix
  EXPECT_FALSE(constant_time_equal("sk-abc12", "sk-abc123"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_FALSE(constant_time_equal(std::string("a\0b", 3), std::string("a\0c", 3)));
  EXPECT_FALSE(constant_time_equal(std::string("ab\0", 3), "ab"));  // trailing NUL differs
  // Bytes whose XOR is 0x80 and high-bit bytes.
  EXPECT_FALSE(constant_time_equal("\x80", "\x00"));
  EXPECT_TRUE(constant_time_equal("\xff\xfe", "\xff\xfe"));
}

class Limits : public ::testing::Test {
 protected:
  std::variant<CompletionRequest, ApiError> parse(const json& body) {
    return parse_completion_request(body.dump(), model_, tok_);
  }
  int status(const json& body) {
    auto r = parse(body);
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).status : 200;
  }
  FakeTokenizer tok_;
  ServedModel model_{"m", 512, 262, 0};
};

TEST_F(Limits, StopStrings) {
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", std::string(kMaxStopBytes, 'x')}}), 200);
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", std::string(kMaxStopBytes + 1, 'x')}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", {"ok", std::string(100000, 'y')}}}), 400);
  auto r = parse({{"prompt", "a"}, {"stop", std::string(kMaxStopBytes + 1, 'x')}});
  EXPECT_EQ(std::get<ApiError>(r).param, "stop");
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", std::vector<std::string>(kMaxStops, "s")}}), 200);
  EXPECT_EQ(status({{"prompt", "a"}, {"stop", std::vector<std::string>(kMaxStops + 1, "s")}}), 400);
}

TEST_F(Limits, ChoicesTokensAndPrompt) {
  EXPECT_EQ(status({{"prompt", "a"}, {"n", kMaxChoices}, {"max_tokens", 1}}), 200);
  EXPECT_EQ(status({{"prompt", "a"}, {"n", kMaxChoices + 1}}), 400);
  EXPECT_EQ(status({{"prompt", {"a", "b"}}, {"n", kMaxChoices / 2 + 1}}), 400);  // prompts x n
  EXPECT_EQ(status({{"prompt", "a"}, {"max_tokens", 510}}), 200);               // BOS + a + 510
  EXPECT_EQ(status({{"prompt", "a"}, {"max_tokens", 511}}), 400);
  // The fake tokenizer gives BOS + one id per byte: 511 bytes + max_tokens 1 = 513 > 512.
  EXPECT_EQ(status({{"prompt", std::string(510, 'a')}, {"max_tokens", 1}}), 200);
  EXPECT_EQ(status({{"prompt", std::string(511, 'a')}, {"max_tokens", 1}}), 400);
  EXPECT_EQ(status({{"prompt", std::string(512, 'a')}, {"max_tokens", 0}}), 400);
  EXPECT_EQ(status({{"prompt", std::string(1 << 20, 'a')}}), 400);
  EXPECT_EQ(status({{"prompt", "a"}, {"logprobs", kMaxLogprobs + 1}}), 400);
}

// Counts encode() calls, to show that hopeless prompts are refused before encoding.
class CountingTokenizer : public FakeTokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    ++calls;
    return FakeTokenizer::encode(text, add_bos);
  }
  mutable int calls = 0;
};

TEST_F(Limits, HopelessPromptsAreRefusedBeforeEncoding) {
  // A prompt that can never fit is refused unread: encoding a 4 MiB prompt costs about 26 s of
  // CPU (docs/RELIABILITY.md).
  CountingTokenizer tok;
  const size_t bound = kPromptBytesFactor * 512 * tok.max_piece_bytes();
  auto parse_with = [&](const json& body) {
    return parse_completion_request(body.dump(), model_, tok);
  };
  auto r = parse_with({{"prompt", std::string(bound + 1, 'a')}});
  ASSERT_TRUE(std::holds_alternative<ApiError>(r));
  EXPECT_EQ(std::get<ApiError>(r).code, "context_length_exceeded");
  EXPECT_EQ(std::get<ApiError>(r).param, "prompt");
  EXPECT_EQ(tok.calls, 0);
  // At the bound it is encoded (and then refused by the token count, as before).
  r = parse_with({{"prompt", std::string(bound, 'a')}});
  EXPECT_EQ(std::get<ApiError>(r).code, "context_length_exceeded");
  EXPECT_EQ(tok.calls, 1);
  // Too many prompts x n: refused before any is encoded.
  tok.calls = 0;
  r = parse_with({{"prompt", std::vector<std::string>(kMaxChoices + 1, "a")}});
  EXPECT_EQ(std::get<ApiError>(r).param, "n");
  r = parse_with({{"prompt", std::vector<std::string>(40, "a")}, {"n", 4}});
  EXPECT_EQ(std::get<ApiError>(r).param, "n");
  EXPECT_EQ(tok.calls, 0);
  EXPECT_EQ(status({{"prompt", std::vector<std::string>(kMaxChoices, "a")}, {"max_tokens", 1}}), 200);
}

TEST_F(Limits, ModelIsANameNotAPath) {
  for (const char* m : {"../../etc/passwd", "/etc/passwd", "m/../m", "./m", "M"}) {
    auto r = parse({{"prompt", "a"}, {"model", m}});
    ASSERT_TRUE(std::holds_alternative<ApiError>(r)) << m;
    EXPECT_EQ(std::get<ApiError>(r).status, 404) << m;
    EXPECT_EQ(std::get<ApiError>(r).code, "model_not_found") << m;
  }
  EXPECT_EQ(status({{"prompt", "a"}, {"model", "m"}}), 200);
}

}  // namespace
}  // namespace flashserve::testing
