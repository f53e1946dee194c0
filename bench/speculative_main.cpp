// bench_speculative: speculative decoding's two measurable parts (docs/SPECULATIVE.md), JSON
// lines on stdout (humans read stderr). No trained draft/target pair is at hand, so:
//   verify  the cost of verification: the step time of B sequences of K + 1 rows each (every
//           row's logits back, as the engine verifies) against B sequences of 1 row (argmax on
//           the device, as greedy decode), each over a cached context of --context tokens, for
//           every B of --batches and K of --ks;
//   oracle  end-to-end speed at a known acceptance: B requests (greedy, EOS ignored) run without
//           speculation, then with the oracle proposer (speculative/oracle_proposer.h) proposing
//           those outputs, each token right with probability alpha, on the same engine;
//           speedup_vs_no_spec is the tokens/s ratio, and same_output counts the requests whose
//           tokens equal the run without speculation. With --draft-model the draft model runs
//           too (its full cost: catching up and decoding every draft), but the oracle's tokens
//           are proposed: a draft model's speed at a known acceptance, as no trained pair is at
//           hand.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/e2e_cost.h"
#include "bench/e2e_run.h"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "cli/cli.h"
#include "core/error.h"
#include "engine/engine.h"
#include "speculative/draft_model_proposer.h"
#include "speculative/oracle_proposer.h"
#include "weights/loaded_model.h"

using namespace flashserve;
using json = nlohmann::ordered_json;
using bench::Clock;
using bench::seconds;

namespace {

struct Args {
  std::string command, model, label, backend = "cuda", mode = "verify";
  std::string batches = "1,4,16,64", ks = "1,2,3,4,5,6,7", alphas = "0.6,0.8";
  int context = 512, prompt_len = 128, output_len = 256, k = 4, repeats = 20, threads = 0;
  std::string policy = "always";
  std::string draft_model;
};

// Runs the draft model for its cost, then proposes the oracle's tokens.
class DraftCostOracle : public Proposer {
 public:
  DraftCostOracle(std::shared_ptr<Proposer> draft, std::shared_ptr<Proposer> oracle)
      : draft_(std::move(draft)), oracle_(std::move(oracle)) {}
  std::string name() const override { return "draft+oracle"; }
  void propose(std::span<const ProposalRequest> requests,
               std::vector<std::vector<int32_t>>* drafts) override {
    draft_->propose(requests, drafts);
    oracle_->propose(requests, drafts);
  }
  void release(uint64_t id) override { draft_->release(id); }

 private:
  std::shared_ptr<Proposer> draft_, oracle_;
};

std::vector<double> numbers(const std::string& list, const char* flag) {
  std::vector<double> out;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      out.push_back(std::stod(item));
    } catch (const std::exception&) {
      throw CLI::ValidationError(flag, "not a number: '" + item + "'");
    }
  }
  if (out.empty()) throw CLI::ValidationError(flag, "empty list");
  return out;
}

double median_ms(std::vector<double> s) { return bench::percentile(std::move(s), 0.5) * 1e3; }

// Steps of B chunks of `rows` rows over `context` cached tokens: the median step time (ms).
// Sequence b owns blocks [b * per_seq, (b + 1) * per_seq); the context's K/V is written once by
// prefill steps first, so attention reads real values.
double time_steps(ModelRunner& runner, int batch, int rows, int context, int repeats) {
  const int bs = runner.block_size();
  const int per_seq = (context + rows + bs - 1) / bs;
  FS_CHECK(int64_t(batch) * per_seq <= runner.num_kv_blocks(), "KV cache of ",
           runner.num_kv_blocks(), " blocks too small for ", batch, " x ", per_seq);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b)
    for (int i = 0; i < per_seq; ++i) tables[size_t(b)].push_back(b * per_seq + i);
  const int vocab = runner.config().vocab_size;
  std::vector<int32_t> tokens(size_t(context + rows));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(3 + (i * 7919) % size_t(vocab - 3));
  std::vector<float> logits;
  std::vector<int32_t> ids;
  for (int b = 0; b < batch; b += 8) {  // the contexts, 8 sequences a step
    StepPlan fill;
    for (int s = b; s < std::min(batch, b + 8); ++s)
      fill.chunks.push_back({.tokens = tokens.data(), .num_tokens = context, .num_cached = 0,
                             .block_table = &tables[size_t(s)], .logits = LogitsWanted::kNone});
    runner.step(fill, &logits, &ids);
  }
  StepPlan plan;
  for (int b = 0; b < batch; ++b) {
    StepChunk c{.tokens = tokens.data() + context, .num_tokens = rows, .num_cached = context,
                .block_table = &tables[size_t(b)]};
    c.logits = rows == 1 ? LogitsWanted::kLast : LogitsWanted::kAll;
    c.sample_path = rows == 1 ? SamplePath::kArgmax : SamplePath::kHost;
    plan.chunks.push_back(c);
  }
  std::vector<double> s;
  for (int i = 0; i < repeats + 3; ++i) {
    logits.clear();
    ids.clear();
    const auto t0 = Clock::now();
    runner.step(plan, &logits, &ids);
    if (i >= 3) s.push_back(seconds(t0, Clock::now()));
  }
  return median_ms(s);
}

void run_verify(const Args& a, ModelRunner& runner, const std::string& gpu) {
  for (double b : numbers(a.batches, "--batches")) {
    const int batch = int(b);
    const double decode_ms = time_steps(runner, batch, 1, a.context, a.repeats);
    for (double k : numbers(a.ks, "--ks")) {
      const double verify_ms = time_steps(runner, batch, int(k) + 1, a.context, a.repeats);
      json r = bench::record_head("speculative_verify", gpu, a.command, a.label, batch * (int(k) + 1));
      r["backend"] = runner.backend_name();
      r["weights"] = bench::weights_format(runner.config(), runner.backend_name().rfind("cuda", 0) == 0);
      r["batch"] = batch;
      r["k"] = int(k);
      r["context"] = a.context;
      r["decode_step_ms"] = decode_ms;
      r["verify_step_ms"] = verify_ms;
      r["rows_ratio_time"] = verify_ms / decode_ms;
      bench::print_record(r);
      std::fprintf(stderr, "%s verify B=%d K=%d: %.3f ms vs decode %.3f ms (x%.2f)\n",
                   a.label.c_str(), batch, int(k), verify_ms, decode_ms, verify_ms / decode_ms);
    }
  }
}

struct Batch {
  std::vector<std::vector<int32_t>> tokens;
  double seconds = 0;
  int64_t drafts = 0, accepted = 0, verifications = 0;
};

// Submits every prompt at once and reads every stream to its end.
Batch run_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts, int output_len,
                bool speculative) {
  const EngineMetrics m0 = engine.metrics();
  std::vector<std::shared_ptr<RequestStream>> streams;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest g;
    g.prompt = prompts[i];
    g.max_tokens = output_len;
    g.sampling.temperature = 0;
    g.has_seed = true;
    g.ignore_eos = true;
    g.speculative = speculative;
    streams.push_back(engine.submit(std::move(g)));
    FS_CHECK(streams.back() != nullptr, "the engine's queue refused request ", i);
  }
  Batch out;
  for (auto& s : streams) {
    std::vector<int32_t> toks;
    for (;;) {
      auto e = s->next(std::chrono::seconds(600));
      FS_CHECK(e.has_value(), "a request took more than 600 s");
      if (e->kind == StreamEvent::Kind::kToken) toks.push_back(e->token.token);
      if (e->kind != StreamEvent::Kind::kFinished) continue;
      FS_CHECK(e->finish == FinishReason::kLength, "a request ended early: ", e->error);
      break;
    }
    out.tokens.push_back(std::move(toks));
  }
  out.seconds = seconds(t0, Clock::now());
  const EngineMetrics m1 = engine.metrics();
  out.drafts = int64_t(m1.spec_draft_tokens_total - m0.spec_draft_tokens_total);
  out.accepted = int64_t(m1.spec_accepted_tokens_total - m0.spec_accepted_tokens_total);
  out.verifications = int64_t(m1.spec_verifications_total - m0.spec_verifications_total);
  return out;
}

void run_oracle(const Args& a, const LoadedModel& model, ModelRunnerOptions ro,
                const std::string& gpu) {
  const ModelConfig& c = model.config();
  const std::vector<double> batches = numbers(a.batches, "--batches");
  const int max_batch = int(*std::max_element(batches.begin(), batches.end()));
  ro.kv_cache_tokens = int64_t(max_batch) * (a.prompt_len + a.output_len + 16);
  auto oracle = std::make_shared<OracleProposer>(0.0, 1, c.vocab_size);
  EngineOptions eo;
  eo.max_num_seqs = std::max(64, max_batch);
  eo.max_num_batched_tokens = std::max(2048, max_batch * (a.k + 1));
  eo.max_queue = max_batch + 8;
  eo.proposer = oracle;
  if (!a.draft_model.empty()) {
    auto draft_model = load_model(a.draft_model);
    ModelRunnerOptions dro = ro;
    dro.kv_cache_tokens = int64_t(max_batch) * (a.prompt_len + a.output_len + 32);
    eo.proposer = std::make_shared<DraftCostOracle>(
        std::make_shared<DraftModelProposer>(ModelRunner::create(*draft_model, dro), c), oracle);
  }
  eo.num_speculative_tokens = a.k;
  eo.adaptive_speculation = a.policy == "adaptive";
  auto engine = Engine::create(ModelRunner::create(model, ro), eo);
  const std::string backend = engine->runner().backend_name();
  for (double b : batches) {
    const int batch = int(b);
    const auto prompts = bench::make_prompts(batch, a.prompt_len, c);
    run_batch(*engine, prompts, std::min(a.output_len, 16), false);  // warm-up
    const Batch off = run_batch(*engine, prompts, a.output_len, false);
    const double off_tps = double(batch) * a.output_len / off.seconds;
    for (size_t i = 0; i < prompts.size(); ++i) oracle->add(prompts[i], off.tokens[i]);
    for (double alpha : numbers(a.alphas, "--alphas")) {
      oracle->set_alpha(alpha);  // the engine is idle between batches
      const Batch on = run_batch(*engine, prompts, a.output_len, true);
      int same = 0;
      for (size_t i = 0; i < prompts.size(); ++i) same += on.tokens[i] == off.tokens[i] ? 1 : 0;
      const double on_tps = double(batch) * a.output_len / on.seconds;
      json r = bench::record_head("speculative_oracle", gpu, a.command, a.label, batch);
      r["backend"] = backend;
      r["weights"] = bench::weights_format(c, backend.rfind("cuda", 0) == 0);
      r["batch"] = batch;
      r["prompt_len"] = a.prompt_len;
      r["output_len"] = a.output_len;
      r["k"] = a.k;
      r["policy"] = a.policy;
      r["proposer"] = a.draft_model.empty() ? "oracle" : "draft model + oracle";
      r["alpha"] = alpha;
      r["tokens_per_s"] = on_tps;
      r["no_spec_tokens_per_s"] = off_tps;
      r["speedup_vs_no_spec"] = on_tps / off_tps;
      r["acceptance"] = on.drafts ? double(on.accepted) / double(on.drafts) : 0.0;
      r["mean_accepted_len"] =
          on.verifications ? double(on.accepted + on.verifications) / double(on.verifications) : 0.0;
      r["same_output"] = same;
      bench::print_record(r);
      std::fprintf(stderr, "%s oracle B=%d alpha=%.2f: %.1f tok/s vs %.1f (x%.2f), accepted %.2f, "
                   "%d/%d outputs equal\n", a.label.c_str(), batch, alpha, on_tps, off_tps,
                   on_tps / off_tps, r["acceptance"].get<double>(), same, batch);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  a.command = cli::command_line(argc, argv);
  CLI::App app{"Speculative decoding: verification cost and oracle end-to-end speed; JSON lines "
               "on stdout.", "bench_speculative"};
  app.add_option("--model", a.model, "model folder or .bin")->required();
  app.add_option("--label", a.label, "the records' model name (default: --model)");
  app.add_option("--backend", a.backend)->check(CLI::IsMember({"cuda", "cpu", "auto"}))
      ->capture_default_str();
  app.add_option("--mode", a.mode)->check(CLI::IsMember({"verify", "oracle"}))->capture_default_str();
  app.add_option("--batches", a.batches, "comma-separated batch sizes")->capture_default_str();
  app.add_option("--ks", a.ks, "verify: comma-separated draft lengths")->capture_default_str();
  app.add_option("--context", a.context, "verify: cached tokens per sequence")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--repeats", a.repeats, "verify: timed steps per case")
      ->check(CLI::Range(1, 10000))->capture_default_str();
  app.add_option("--alphas", a.alphas, "oracle: comma-separated acceptance rates")
      ->capture_default_str();
  app.add_option("--k", a.k, "oracle: draft tokens per step")
      ->check(CLI::Range(1, kMaxSpeculativeTokens))->capture_default_str();
  app.add_option("--policy", a.policy, "oracle: the speculation policy")
      ->check(CLI::IsMember({"always", "adaptive"}))->capture_default_str();
  app.add_option("--draft-model", a.draft_model,
                 "oracle: a draft model run for its cost (its tokens replaced by the oracle's)");
  app.add_option("--prompt-len", a.prompt_len)->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--output-len", a.output_len)->check(CLI::Range(2, 1 << 20))->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads, 0 = all cores")->check(CLI::Range(0, 1024));
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (a.label.empty()) a.label = a.model;
  return cli::run_main("bench_speculative", [&] {
    auto model = load_model(a.model);
    const std::string gpu = a.backend == "cpu" ? "cpu" : bench::gpu_name();
    ModelRunnerOptions ro;
    ro.backend = a.backend;
    ro.threads = a.threads;
    if (a.mode == "verify") {
      const std::vector<double> batches = numbers(a.batches, "--batches");
      const double max_batch = *std::max_element(batches.begin(), batches.end());
      ro.kv_cache_tokens = int64_t(max_batch) * (a.context + kMaxSpeculativeTokens + 32);
      auto runner = ModelRunner::create(*model, ro);
      run_verify(a, *runner, gpu);
    } else {
      run_oracle(a, *model, ro, gpu);
    }
    return 0;
  });
}
