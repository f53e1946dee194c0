// Constrained decoding through the engine (GenerationRequest::constraint). Over FakeRunner and a
// small synthetic vocabulary: the trigger state machine (free text, trigger, grammar region, end
// token, re-arming), must_trigger, end tokens only where the grammar accepts, refusals and a
// grammar that cannot continue failing its request alone. Over stories260K with its tokenizer's
// vocabulary: JSON Schema outputs that python3-jsonschema validates, all finishing with stop,
// identical greedy/seeded outputs alone, in a batch, under preemption and on the host sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "fake_runner.h"
#include "stories_engine.h"
#include "stream_util.h"
#include "structured/compiled_grammar.h"
#include "tests/common/temp_dir.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {
namespace {

using structured::GrammarCompiler;
using structured::TokenVocabulary;
using structured::VocabTrie;

// An integer-valued object: {"a":N} with 0 <= N <= 99, and nothing else.
constexpr const char* kSmallSchema =
    R"({"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99}},)"
    R"("required":["a"],"additionalProperties":false})";

// ---- FakeRunner, vocabulary of 64: 2 EOS, 3 trigger, 4 end marker, 5.. one character each ----
constexpr int32_t kEos = 2, kTrigger = 3, kEnd = 4;

std::shared_ptr<const VocabTrie> fake_trie() {
  TokenVocabulary v;
  v.token_bytes.assign(64, "");
  const std::string chars = "{}[]\":,-. abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ";
  for (size_t i = 0; i < chars.size() && 5 + i < 64; ++i) v.token_bytes[5 + i] = chars.substr(i, 1);
  v.stop_ids = {kEos};
  return std::make_shared<const VocabTrie>(std::move(v));
}

GrammarCompiler& fake_compiler() {
  static GrammarCompiler c(fake_trie());
  return c;
}

std::string bytes_of(const VocabTrie& trie, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t t : ids) out += trie.vocabulary().token_bytes[size_t(t)];
  return out;
}

void expect_small_object(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << text;
  ASSERT_TRUE(j.is_object() && j.size() == 1 && j.contains("a") && j["a"].is_number_integer()) << text;
  EXPECT_GE(j["a"].get<int>(), 0);
  EXPECT_LE(j["a"].get<int>(), 99);
}

GenerationRequest fake_request(uint64_t seed, float temperature, OutputConstraint c) {
  GenerationRequest r = make_request({1, 7, 9, int32_t(10 + seed % 40)}, 80, temperature, seed);
  r.ignore_eos = false;
  r.constraint = std::move(c);
  return r;
}

TEST(EngineConstrained, GrammarFromTheFirstTokenEndsWithEos) {
  auto runner = std::make_unique<FakeRunner>(64, 16);
  FakeRunner* fake = runner.get();
  auto engine = Engine::create(std::move(runner), {});
  for (uint64_t seed = 0; seed < 24; ++seed) {
    OutputConstraint c;
    c.grammar = fake_compiler().json_schema(kSmallSchema);  // end_tokens empty: the model's EOS
    Collected out = collect(*engine->submit(fake_request(seed, seed % 3 ? 1.f : 0.f, c)));
    ASSERT_EQ(out.finish, FinishReason::kStop) << out.error;
    ASSERT_EQ(out.tokens.back(), kEos);
    out.tokens.pop_back();
    expect_small_object(bytes_of(*fake_trie(), out.tokens));
  }
  EXPECT_EQ(fake->greedy_rows(), 0) << "a masked greedy row took the unmasked argmax path";
  EXPECT_GT(fake->drawn_rows(), 0);
}

// Free text until the trigger, then the grammar until the end marker (allowed only once the
// object is complete, the vocabulary's EOS never inside), then free again: several calls.
TEST(EngineConstrained, TriggersOpenRegionsThatEndTokensClose) {
  auto engine = Engine::create(std::make_unique<FakeRunner>(64, 16), {});
  int regions = 0;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    OutputConstraint c;
    c.grammar = fake_compiler().json_schema(kSmallSchema);
    c.triggers = {kTrigger};
    c.end_tokens = {kEnd};
    GenerationRequest r = fake_request(seed, 1.f, c);
    // Triggers often, stops late; the end marker's bias keeps it out of free text, and inside a
    // region it still comes where it is the only allowed token (the mask goes first).
    r.sampling.logit_bias = {{kTrigger, 4.f}, {kEos, -3.f}, {kEnd, -50.f}};
    Collected out = collect(*engine->submit(r));
    ASSERT_NE(out.finish, FinishReason::kError) << out.error;
    std::vector<int32_t> region;
    bool inside = false;
    for (int32_t t : out.tokens) {
      if (!inside) {
        EXPECT_NE(t, kEnd) << "an end marker outside a region";
        inside = t == kTrigger;
        region.clear();
      } else if (t == kEnd) {
        expect_small_object(bytes_of(*fake_trie(), region));
        ++regions;
        inside = false;
      } else {
        ASSERT_NE(t, kEos) << "EOS inside a region whose end token is the marker";
        region.push_back(t);
      }
    }
  }
  EXPECT_GE(regions, 20) << "too few regions: the test would prove little";
}

TEST(EngineConstrained, MustTriggerStartsWithTheTrigger) {
  auto engine = Engine::create(std::make_unique<FakeRunner>(64, 16), {});
  for (uint64_t seed = 0; seed < 12; ++seed) {
    OutputConstraint c;
    c.grammar = fake_compiler().json_schema(kSmallSchema);
    c.triggers = {kTrigger};
    c.end_tokens = {kEnd};
    c.must_trigger = true;
    Collected out = collect(*engine->submit(fake_request(seed, seed % 2 ? 1.f : 0.f, c)));
    ASSERT_NE(out.finish, FinishReason::kError) << out.error;
    ASSERT_FALSE(out.tokens.empty());
    EXPECT_EQ(out.tokens[0], kTrigger);
  }
}

// The host sampler (device sampling off) and the device path give the same tokens.
TEST(EngineConstrained, HostAndDevicePathsAgree) {
  std::vector<std::vector<int32_t>> outs[2];
  for (int host = 0; host < 2; ++host) {
    EngineOptions o;
    o.sample_on_device = host == 0;
    auto engine = Engine::create(std::make_unique<FakeRunner>(64, 16), o);
    for (uint64_t seed = 0; seed < 10; ++seed) {
      OutputConstraint c;
      c.grammar = fake_compiler().json_schema(kSmallSchema);
      outs[host].push_back(collect(*engine->submit(fake_request(seed, seed % 2 ? 0.8f : 0.f, c))).tokens);
    }
  }
  EXPECT_EQ(outs[0], outs[1]);
}

TEST(EngineConstrained, BadConstraintsFailTheirRequestAlone) {
  auto engine = Engine::create(std::make_unique<FakeRunner>(64, 16), {});
  auto expect_error = [&](OutputConstraint c, const std::string& why) {
    Collected out = collect(*engine->submit(fake_request(1, 1.f, std::move(c))));
    EXPECT_EQ(out.finish, FinishReason::kError);
    EXPECT_NE(out.error.find(why), std::string::npos) << out.error;
  };
  expect_error(OutputConstraint{}, "without a grammar");
  TokenVocabulary small;
  small.token_bytes = {"a", "b", ""};
  small.stop_ids = {2};
  GrammarCompiler other(std::make_shared<const VocabTrie>(small));
  OutputConstraint c;
  c.grammar = other.json_object();
  expect_error(c, "vocabulary of 3 tokens");
  c.grammar = fake_compiler().json_object();
  c.must_trigger = true;
  expect_error(c, "must_trigger without triggers");
  c.must_trigger = false;
  c.triggers = {64};
  expect_error(c, "token 64 outside vocab");
  // A grammar the vocabulary cannot spell ('Q' is no token): fails at its first mask, and a
  // request beside it is unaffected.
  OutputConstraint q;
  q.grammar = fake_compiler().json_schema(R"({"const":"Q"})");
  auto bad = engine->submit(fake_request(2, 1.f, q));
  OutputConstraint ok;
  ok.grammar = fake_compiler().json_schema(kSmallSchema);
  auto good = engine->submit(fake_request(3, 1.f, ok));
  Collected b = collect(*bad), g = collect(*good);
  EXPECT_EQ(b.finish, FinishReason::kError);
  EXPECT_NE(b.error.find("no token"), std::string::npos) << b.error;
  EXPECT_EQ(g.finish, FinishReason::kStop) << g.error;
  EXPECT_FALSE(engine->failed());
}

// ---- stories260K and its tokenizer ---------------------------------------------------------

GrammarCompiler& stories_compiler() {
  static GrammarCompiler c(std::make_shared<const VocabTrie>(structured::vocabulary_from_tokenizer(
      *Tokenizer::load(FS_MODELS_DIR "/stories260K/tok512.model"), stories_model().config().vocab_size)));
  return c;
}

// Bounded everywhere, so every output ends: a name of at most 10 characters, an integer range,
// up to 3 tags from an enum, a boolean and an optional nested object.
const std::string kPersonSchema =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},)"
    R"("age":{"type":"integer","minimum":0,"maximum":120},)"
    R"("tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":3},)"
    R"("ok":{"type":"boolean"},"pet":{"type":"object","properties":{"kind":{"enum":["cat","dog"]}},)"
    R"("required":["kind"],"additionalProperties":false}},)"
    R"("required":["name","age","tags","ok"],"additionalProperties":false})";

// 12 requests: even ones greedy, odd ones seeded at temperature 1.
std::vector<GenerationRequest> stories_requests() {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt = {1};
    for (int j = 0; j < 3 + 7 * i % 40; ++j) prompt.push_back(3 + (i * 131 + j * 29) % 500);
    GenerationRequest r = make_request(prompt, 200, i % 2 ? 1.f : 0.f, 500 + i);
    OutputConstraint c;
    c.grammar = stories_compiler().json_schema(kPersonSchema);
    r.constraint = c;
    out.push_back(r);
  }
  return out;
}

std::vector<std::vector<int32_t>> run_all(Engine& engine, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(engine.submit(r));
  std::vector<std::vector<int32_t>> out;
  for (auto& s : streams) {
    Collected c = collect(*s);
    EXPECT_EQ(c.finish, FinishReason::kStop) << c.error;
    out.push_back(c.tokens);
  }
  return out;
}

// Every output, EOS last, spells JSON that python3-jsonschema accepts (validate_walks.py).
void validate_with_jsonschema(const std::vector<std::vector<int32_t>>& outs) {
  const VocabTrie& trie = stories_compiler().trie();
  const std::string dir = test::fresh_dir("walks");
  const std::string schema = dir + "/person.json", walks = dir + "/walks.jsonl";
  std::ofstream(schema) << kPersonSchema;
  std::ofstream f(walks);
  for (std::vector<int32_t> t : outs) {
    ASSERT_FALSE(t.empty());
    const std::vector<int32_t>& stop = stories_model().config().eos_token_ids;
    EXPECT_NE(std::find(stop.begin(), stop.end(), t.back()), stop.end()) << t.back();
    t.pop_back();
    const std::string text = bytes_of(trie, t);
    EXPECT_FALSE(nlohmann::json::parse(text, nullptr, false).is_discarded()) << text;
    std::string hex;
    for (unsigned char ch : text) hex += "0123456789abcdef"[ch >> 4], hex += "0123456789abcdef"[ch & 15];
    f << nlohmann::json{{"kind", "schema"}, {"spec", schema}, {"hex", hex}}.dump() << "\n";
  }
  f.close();
  const std::string cmd = "python3 " + std::string(FS_SOURCE_DIR) +
                          "/tests/structured/validate_walks.py " + walks;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

TEST(EngineConstrainedModel, SchemaOutputsValidateAndAreDeterministic) {
  const auto reqs = stories_requests();
  std::vector<std::vector<int32_t>> alone;
  {
    auto engine = make_stories_engine(4096);
    for (const auto& r : reqs) alone.push_back(run_all(*engine, {r})[0]);
  }
  validate_with_jsonschema(alone);
  EngineOptions batched;
  batched.max_num_batched_tokens = 64;
  auto together = make_stories_engine(4096, batched);
  EXPECT_EQ(run_all(*together, reqs), alone) << "batch composition changed an output";
  EngineOptions host = batched;
  host.sample_on_device = false;
  auto on_host = make_stories_engine(4096, host);
  EXPECT_EQ(run_all(*on_host, reqs), alone) << "the host sampler's path differs";
  auto preempting = make_stories_engine(256, batched);  // 16 blocks: sequences get preempted
  EXPECT_EQ(run_all(*preempting, reqs), alone) << "preemption changed an output";
  EXPECT_GT(preempting->metrics().num_preemptions, 0u);
  // The masks of a batch on one thread or spread over several: the same outputs.
  for (int threads : {1, 3}) {
    EngineOptions o = batched;
    o.mask_threads = threads;
    auto engine = make_stories_engine(4096, o);
    EXPECT_EQ(run_all(*engine, reqs), alone) << threads << " mask threads";
  }
}

TEST(EngineConstrained, MaskThreadsMustBePositive) {
  EngineOptions o;
  o.mask_threads = 0;
  EXPECT_THROW(Engine::create(std::make_unique<FakeRunner>(64, 16), o), Error);
}

}  // namespace
}  // namespace flashserve
