// Speculative decoding through the engine on the CPU backend: with any proposer — always wrong,
// always right, right at random, random tokens, n-gram lookup, a draft model (the target itself,
// or a random model of its vocabulary) — and any draft length, every
// request's tokens (and logprobs) are those of the same engine without speculation: greedy and
// seeded sampling with penalties, EOS and max_tokens, several choices of one prompt (n > 1),
// concurrency with chunked prefill, prefix caching and preemption, structured outputs; on
// stories260K and on random Llama and mixture-of-experts models. The KV cache is whole after
// each run, a request may turn speculation off, cancelling mid-speculation frees its blocks, and
// a draft model of another vocabulary is refused.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "core/error.h"
#include "engine/constrained_output.h"
#include "engine/engine.h"
#include "speculative/draft_model_proposer.h"
#include "speculative/ngram_proposer.h"
#include "speculative/oracle_proposer.h"
#include "stories_engine.h"
#include "stream_util.h"
#include "structured/compiled_grammar.h"
#include "tests/common/temp_dir.h"
#include "tests/model/moe_test_util.h"
#include "tokenizer/tokenizer.h"
#include "weights/random_model.h"

namespace flashserve {
namespace {

using namespace std::chrono_literals;

// Random draft tokens: a function of the sequence's length, so a rerun proposes the same.
class RandomProposer : public Proposer {
 public:
  explicit RandomProposer(int vocab) : vocab_(vocab) {}
  std::string name() const override { return "random"; }
  void propose(std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override {
    drafts->resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      std::mt19937 rng(uint32_t(requests[i].tokens.size()));
      (*drafts)[i].clear();
      const int n = 1 + int(rng() % uint32_t(requests[i].max_draft));
      for (int j = 0; j < n; ++j) (*drafts)[i].push_back(int32_t(rng() % uint32_t(vocab_)));
    }
  }

 private:
  const int vocab_;
};

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
  int num_draft_tokens = 0, num_accepted_tokens = 0;  // the request's, from kFinished
};

std::unique_ptr<Engine> make_engine(const LoadedModel& model, int64_t kv_tokens,
                                    EngineOptions eo, int block_size = 16) {
  ModelRunnerOptions ro;
  ro.backend = "cpu";
  ro.block_size = block_size;
  ro.kv_cache_tokens = kv_tokens;
  ro.threads = 1;
  eo.max_num_batched_tokens = 64;  // chunked prefill
  return Engine::create(ModelRunner::create(model, ro), eo);
}

EngineOptions speculating(std::shared_ptr<Proposer> p, int k) {
  EngineOptions eo;
  eo.proposer = std::move(p);
  eo.num_speculative_tokens = k;
  eo.adaptive_speculation = false;  // every decode verifies k draft tokens
  return eo;
}

// Submits every request at once and reads them all; the cache is whole afterwards.
std::vector<Output> run(Engine& engine, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(engine.submit(r));
  std::vector<Output> out;
  for (auto& s : streams) {
    EXPECT_NE(s, nullptr);
    if (!s) return out;
    Collected c = collect(*s);
    EXPECT_NE(c.finish, FinishReason::kError) << c.error;
    Output o;
    o.tokens = c.tokens;
    o.finish = c.finish;
    o.num_draft_tokens = c.num_draft_tokens;
    o.num_accepted_tokens = c.num_accepted_tokens;
    for (const SampledToken& t : c.sampled) o.logprobs.push_back(t.logprob);
    out.push_back(o);
  }
  EXPECT_EQ(engine.metrics().kv_blocks_used, 0);
  EXPECT_FALSE(engine.failed());
  return out;
}

// Compares logprobs bit for bit, NaN (none asked for) included.
void expect_same(const std::vector<Output>& want, const std::vector<Output>& got,
                 const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].tokens, got[i].tokens) << what << ", request " << i;
    EXPECT_EQ(want[i].finish, got[i].finish) << what << ", request " << i;
    ASSERT_EQ(want[i].logprobs.size(), got[i].logprobs.size()) << what << ", request " << i;
    for (size_t t = 0; t < want[i].logprobs.size(); ++t)
      EXPECT_EQ(std::memcmp(&want[i].logprobs[t], &got[i].logprobs[t], sizeof(float)), 0)
          << what << ", request " << i << " token " << t;
  }
}

// 18 requests over `vocab` (ids 3..): greedy; seeded at temperature 1; seeded with top-k, top-p,
// penalties and logprobs; greedy stopping at EOS. The last two are more choices of request 1's
// prompt (n = 3, each choice its own seed). Prompts repeat pieces so that n-gram lookup finds
// matches.
std::vector<GenerationRequest> mixed_requests(int vocab, uint32_t seed, int max_tokens) {
  std::mt19937 rng(seed);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> piece;
    for (int j = 0; j < 3 + int(rng() % 6); ++j) piece.push_back(3 + int32_t(rng() % uint32_t(vocab - 3)));
    std::vector<int32_t> prompt = {1};
    for (int rep = 0; rep < 1 + int(rng() % 4); ++rep) {
      prompt.insert(prompt.end(), piece.begin(), piece.end());
      prompt.push_back(3 + int32_t(rng() % uint32_t(vocab - 3)));
    }
    GenerationRequest r = make_request(prompt, 1 + int(rng() % uint32_t(max_tokens)),
                                       i % 4 == 1 ? 1.f : 0.f, 1000 + uint64_t(seed) + uint64_t(i));
    if (i % 4 == 2) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_k = 40;
      r.sampling.top_p = 0.9f;
      r.sampling.presence_penalty = 0.3f;
      r.sampling.frequency_penalty = 0.2f;
      r.sampling.repetition_penalty = 1.1f;
      r.sampling.logprobs = 2;
    }
    if (i % 4 == 3) r.ignore_eos = false;
    out.push_back(r);
  }
  for (uint64_t choice = 1; choice <= 2; ++choice) {
    GenerationRequest r = out[1];
    r.sampling.seed += choice * 7919;
    out.push_back(r);
  }
  return out;
}

// The reference outputs of `reqs` as `continuations` for an oracle.
std::shared_ptr<OracleProposer> oracle(double alpha, int vocab,
                                       const std::vector<GenerationRequest>& reqs,
                                       const std::vector<Output>& reference) {
  auto o = std::make_shared<OracleProposer>(alpha, 99, vocab);
  for (size_t i = 0; i < reqs.size(); ++i) o->add(reqs[i].prompt, reference[i].tokens);
  return o;
}

// Every proposer and draft length gives the reference output; the always-right oracle's drafts
// are all accepted, the always-wrong one's none.
struct Case {
  std::string name;
  std::shared_ptr<Proposer> proposer;
  double alpha;  // the oracle's, -1 for the others
  bool right_when_greedy = false;  // a draft model that is the target: greedy drafts all right
};

void expect_exact_for_every_proposer(const LoadedModel& model, int64_t kv_tokens,
                                     const std::vector<GenerationRequest>& reqs,
                                     bool expect_preemption, int block_size = 16,
                                     std::vector<Case> more = {}) {
  const int vocab = model.config().vocab_size;
  std::vector<Output> reference;
  {
    auto engine = make_engine(model, kv_tokens, EngineOptions{}, block_size);
    reference = run(*engine, reqs);
  }
  int varied = 0;  // outputs of several distinct tokens: a degenerate model would prove little
  for (const Output& o : reference)
    varied += std::set<int32_t>(o.tokens.begin(), o.tokens.end()).size() > 3 ? 1 : 0;
  EXPECT_GE(varied, int(reqs.size()) / 2);
  // The n = 3 choices (requests 1, 16, 17) share a prompt, so the oracle proposes the last
  // added one's tokens to all three: "always right" (and "always wrong") is not that for
  // requests 1 and 16.
  std::vector<Case> cases = {
      {"oracle always wrong", oracle(0.0, vocab, reqs, reference), 0.0},
      {"oracle always right", oracle(1.0, vocab, reqs, reference), 1.0},
      {"oracle right 60%", oracle(0.6, vocab, reqs, reference), 0.6},
      {"random tokens", std::make_shared<RandomProposer>(vocab), -1},
      {"n-gram 1..3", std::make_shared<NgramProposer>(1, 3), -1},
  };
  for (Case& c : more) cases.push_back(std::move(c));
  for (const Case& c : cases) {
    for (int k : {1, 3, 7}) {
      const std::string what = c.name + ", k = " + std::to_string(k);
      SCOPED_TRACE(what);
      auto engine = make_engine(model, kv_tokens, speculating(c.proposer, k), block_size);
      const std::vector<Output> got = run(*engine, reqs);
      expect_same(reference, got, what);
      const EngineMetrics m = engine->metrics();
      EXPECT_EQ(m.speculative_method, c.proposer->name());
      EXPECT_GT(m.spec_verifications_total, 0u);
      EXPECT_GT(m.spec_draft_tokens_total, 0u);
      EXPECT_LE(m.spec_accepted_tokens_total, m.spec_draft_tokens_total);
      if (c.alpha == 0.0)
        for (size_t i = 0; i < got.size(); ++i)
          if (i != 1 && i != 16) EXPECT_EQ(got[i].num_accepted_tokens, 0) << "request " << i;
      if (c.alpha == 1.0) {
        for (size_t i = 0; i < got.size(); ++i) {
          if (i == 1 || i == 16) continue;
          EXPECT_EQ(got[i].num_accepted_tokens, got[i].num_draft_tokens) << "request " << i;
          // Room for drafts (no preemption): every decode verified one.
          if (!expect_preemption && got[i].tokens.size() > 2) EXPECT_GT(got[i].num_draft_tokens, 0) << "request " << i;
        }
      }
      if (expect_preemption) EXPECT_GT(m.num_preemptions, 0u);
      if (c.right_when_greedy)  // requests 0, 4, 8, 12: greedy, EOS ignored
        for (size_t i = 0; i < 16; i += 4) {
          EXPECT_EQ(got[i].num_accepted_tokens, got[i].num_draft_tokens) << "request " << i;
          if (got[i].tokens.size() > 2) EXPECT_GT(got[i].num_draft_tokens, 0) << "request " << i;
        }
    }
  }
}

TEST(EngineSpeculative, StoriesEveryProposerGivesTheSameOutput) {
  expect_exact_for_every_proposer(stories_model(), 4096, mixed_requests(512, 3, 60), false);
}

TEST(EngineSpeculative, StoriesManySeeds) {
  // Seeded sampling alone, over many seeds: each position's draw is its own.
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    GenerationRequest r = make_request({1, 45, 67, 89, 45, 67}, 40, 1.f, 5000 + uint64_t(i));
    r.sampling.top_p = i % 2 ? 0.8f : 1.f;
    reqs.push_back(r);
  }
  std::vector<Output> reference;
  {
    auto engine = make_engine(stories_model(), 8192, EngineOptions{});
    reference = run(*engine, reqs);
  }
  auto engine = make_engine(stories_model(), 8192,
                            speculating(oracle(0.7, 512, reqs, reference), 4));
  expect_same(reference, run(*engine, reqs), "oracle 70%, 24 seeds");
  EXPECT_GT(engine->metrics().spec_accepted_tokens_total, 0u);
}

TEST(EngineSpeculative, StoriesUnderPreemption) {
  // 10 blocks of 16 for 18 concurrent requests: sequences are preempted mid-speculation and
  // recomputed; drafts only take blocks nobody needs.
  expect_exact_for_every_proposer(stories_model(), 160, mixed_requests(512, 4, 40), true);
}

TEST(EngineSpeculative, RandomLlamaAndMoeModels) {
  ModelConfig llama = test::moe_base("LlamaForCausalLM", 2);
  llama.moe = {};
  for (const ModelConfig& config : {llama, test::qwen3_moe_config()}) {
    const std::string dir = test::fresh_dir(config.architecture);
    write_random_hf_model(dir, config, 21, DType::kF32, 1, 0.08f);
    auto model = load_model(dir);
    SCOPED_TRACE(config.architecture);
    expect_exact_for_every_proposer(*model, 96, mixed_requests(model->config().vocab_size, 5, 24),
                                    true, 4);
  }
}

std::shared_ptr<Proposer> draft_proposer(const LoadedModel& draft) {
  ModelRunnerOptions ro;
  ro.backend = "cpu";
  ro.block_size = 16;
  ro.kv_cache_tokens = 8192;
  ro.threads = 1;
  return std::make_shared<DraftModelProposer>(ModelRunner::create(draft, ro),
                                              stories_model().config());
}

// A random model of stories260K's vocabulary: a draft model that is mostly wrong.
std::unique_ptr<LoadedModel> random_stories_draft(const std::string& name) {
  ModelConfig c = test::moe_base("LlamaForCausalLM", 1);
  c.moe = {};
  c.vocab_size = stories_model().config().vocab_size;
  c.max_model_len = stories_model().config().max_model_len;
  c.bos_token_id = stories_model().config().bos_token_id;
  c.eos_token_ids = stories_model().config().eos_token_ids;
  const std::string dir = test::fresh_dir(name);
  write_random_hf_model(dir, c, 8, DType::kF32, 1, 0.08f);
  return load_model(dir);
}

TEST(EngineSpeculative, DraftModels) {
  // stories260K drafting for itself (always right where greedy), and a random model.
  auto random_draft = random_stories_draft("draft");
  expect_exact_for_every_proposer(
      stories_model(), 160, mixed_requests(512, 6, 40), true, 16,
      {{"draft: the target itself", draft_proposer(stories_model()), -1, true},
       {"draft: a random model", draft_proposer(*random_draft), -1}});
}

TEST(EngineSpeculative, DraftModelOfAnotherVocabularyIsRefused) {
  ModelConfig c = test::moe_base("LlamaForCausalLM", 1);
  c.moe = {};
  const std::string dir = test::fresh_dir("other_vocab");
  write_random_hf_model(dir, c, 8, DType::kF32, 1, 0.08f);
  auto other = load_model(dir);
  try {
    draft_proposer(*other);
    ADD_FAILURE() << "a draft of 320 tokens was accepted for a target of 512";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary has 320 tokens, the target's 512"),
              std::string::npos) << e.what();
  }
}

TEST(EngineSpeculative, DraftsAreCutWhereTheGrammarForbids) {
  // Ids 5.. spell one character each; 2 is EOS.
  const std::string chars = "{}[]\":,-. abcdefghijklmnopqrstuvwxyz0123456789";
  structured::TokenVocabulary v;
  v.token_bytes.assign(64, "");
  for (size_t i = 0; i < chars.size(); ++i) v.token_bytes[5 + i] = chars.substr(i, 1);
  v.stop_ids = {2};
  structured::GrammarCompiler compiler(std::make_shared<const structured::VocabTrie>(v));
  OutputConstraint oc;
  oc.grammar = compiler.json_schema(
      R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],)"
      R"("additionalProperties":false})");
  const std::vector<int32_t> eos = {2};
  ConstrainedOutput c(oc, eos);
  const auto ids = [&](const std::string& s) {
    std::vector<int32_t> out;
    for (char ch : s) out.push_back(5 + int32_t(chars.find(ch)));
    return out;
  };
  std::vector<uint32_t> before(mask_words(64)), after(mask_words(64));
  c.fill_mask(before.data());
  std::vector<int32_t> whole = ids("{\"a\":12}");
  whole.push_back(2);
  EXPECT_EQ(c.allowed_prefix(whole), whole.size());
  EXPECT_EQ(c.allowed_prefix(ids("{\"b\":1}")), 2u);  // 'b' is no key of the schema
  EXPECT_EQ(c.allowed_prefix(ids("x")), 0u);
  std::vector<int32_t> early = ids("{\"a\"");
  early.push_back(2);  // EOS before the object is complete
  EXPECT_EQ(c.allowed_prefix(early), 4u);
  c.fill_mask(after.data());
  EXPECT_EQ(before, after) << "allowed_prefix changed the state";
  // After two accepted tokens the check starts from there.
  c.accept(ids("{")[0]);
  c.accept(ids("\"")[0]);
  EXPECT_EQ(c.allowed_prefix(ids("a\":7}")), 5u);
}

TEST(EngineSpeculative, StructuredOutputs) {
  using structured::GrammarCompiler;
  using structured::VocabTrie;
  GrammarCompiler compiler(std::make_shared<const VocabTrie>(structured::vocabulary_from_tokenizer(
      *Tokenizer::load(FS_MODELS_DIR "/stories260K/tok512.model"),
      stories_model().config().vocab_size)));
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},)"
      R"("age":{"type":"integer","minimum":0,"maximum":120},)"
      R"("tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":3}},)"
      R"("required":["name","age","tags"],"additionalProperties":false})";
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    GenerationRequest r = make_request({1, 3 + 17 * i, 9 + 31 * i}, 120, i % 2 ? 1.f : 0.f,
                                       700 + uint64_t(i));
    r.ignore_eos = false;
    OutputConstraint c;
    c.grammar = compiler.json_schema(schema);
    r.constraint = c;
    reqs.push_back(r);
  }
  std::vector<Output> reference;
  {
    auto engine = make_engine(stories_model(), 4096, EngineOptions{});
    reference = run(*engine, reqs);
  }
  for (const Output& o : reference) EXPECT_EQ(o.finish, FinishReason::kStop);
  const std::vector<std::pair<std::string, std::shared_ptr<Proposer>>> proposers = {
      {"oracle right 80%", oracle(0.8, 512, reqs, reference)},
      {"random tokens (mostly forbidden by the grammar)", std::make_shared<RandomProposer>(512)},
      {"n-gram", std::make_shared<NgramProposer>(1, 4)},
      {"draft: the target itself", draft_proposer(stories_model())}};
  for (const auto& [name, p] : proposers) {
    auto engine = make_engine(stories_model(), 4096, speculating(p, 5));
    expect_same(reference, run(*engine, reqs), name);
    // Random tokens are mostly cut before verification (the grammar forbids them).
    if (name.rfind("random", 0) != 0) EXPECT_GT(engine->metrics().spec_verifications_total, 0u) << name;
  }
}

TEST(EngineSpeculative, AdaptivePolicyStopsWhereRowsCostInProportion) {
  // On the CPU a step's time grows with its rows, so even right drafts barely pay and wrong
  // ones never do: once the policy has measured a few steps it stops proposing. The output is
  // the same throughout.
  GenerationRequest r = make_request({1, 5, 6, 7, 8}, 200, 0.f);
  std::vector<Output> reference;
  {
    auto engine = make_engine(stories_model(), 4096, EngineOptions{});
    reference = run(*engine, {r});
  }
  EngineOptions eo = speculating(oracle(0.0, 512, {r}, reference), 4);
  eo.adaptive_speculation = true;
  auto engine = make_engine(stories_model(), 4096, eo);
  expect_same(reference, run(*engine, {r}), "adaptive, always wrong");
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.spec_draft_tokens_total, 0u);  // it measured with drafts first
  EXPECT_LT(m.spec_verifications_total, 50u) << "of 200 tokens";
}

TEST(EngineSpeculative, RequestMayTurnItOff) {
  auto engine = make_engine(stories_model(), 4096,
                            speculating(std::make_shared<RandomProposer>(512), 4));
  GenerationRequest r = make_request({1, 5, 6, 7}, 30, 1.f, 3);
  r.speculative = false;
  const std::vector<Output> off = run(*engine, {r});
  EXPECT_EQ(off[0].tokens.size(), 30u);
  EXPECT_EQ(engine->metrics().spec_verifications_total, 0u);
  r.speculative = true;
  expect_same(off, run(*engine, {r}), "the same request speculating");
  EXPECT_GT(engine->metrics().spec_verifications_total, 0u);
}

TEST(EngineSpeculative, CancelMidSpeculationFreesBlocks) {
  std::vector<GenerationRequest> reqs = {make_request({1, 8, 9, 8, 9, 8}, 400, 0.f)};
  auto engine = make_engine(stories_model(), 4096,
                            speculating(std::make_shared<RandomProposer>(512), 7));
  auto s = engine->submit(reqs[0]);
  int seen = 0;
  while (seen < 20) {
    auto e = s->next(5s);
    ASSERT_TRUE(e.has_value());
    ASSERT_EQ(e->kind, StreamEvent::Kind::kToken);
    ++seen;
  }
  s->cancel();
  Collected c = collect(*s);
  EXPECT_EQ(c.finish, FinishReason::kAbort);
  EXPECT_EQ(engine->metrics().kv_blocks_used, 0);
  EXPECT_GT(engine->metrics().spec_verifications_total, 0u);
}

TEST(EngineSpeculative, RefusesDraftLengthOutOfRange) {
  for (int k : {0, kMaxSpeculativeTokens + 1}) {
    ModelRunnerOptions ro;
    ro.backend = "cpu";
    ro.kv_cache_tokens = 256;
    ro.threads = 1;
    EngineOptions eo = speculating(std::make_shared<NgramProposer>(1, 3), k);
    try {
      Engine::create(ModelRunner::create(stories_model(), ro), eo);
      ADD_FAILURE() << "k = " << k << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("num_speculative_tokens"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace flashserve
