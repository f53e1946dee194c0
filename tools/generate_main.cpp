// flashserve-generate: loads a model and a tokenizer, generates from one prompt with a simple
// single-sequence loop (whole-prompt prefill, then one decode step per token, KV blocks taken
// in order), streams the text to stdout and reports tokens/s on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/error.h"
#include "engine/stop_rules.h"
#include "model/forward_runner.h"
#include "model/model_runner.h"
#include "parallel/communicator.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"
#include "weights/default_model.h"
#include "weights/loaded_model.h"

using namespace flashserve;

namespace {

struct Args {
  std::string model, tokenizer, prompt = "Once upon a time", backend = "auto", quantize = "none";
  long max_tokens = 256, top_k = 0, threads = 0, tensor_parallel_size = 1;
  bool enforce_eager = false;
  double temperature = 1.0, top_p = 1.0;
  unsigned long long seed = 0;
  bool has_seed = false;
};

// The command line (cli/cli.h conventions: --help exits 0, a bad flag or value exits 2).
void add_flags(CLI::App& app, Args& a) {
  app.add_option("--model", a.model,
                 "HF folder or llama2.c .bin (default: stories260K beside the program)");
  cli::add_quantize_flag(app, a.quantize);
  app.add_option("--tokenizer", a.tokenizer, "tokenizer.json or SentencePiece .model (default: beside the model)");
  app.add_option("--prompt", a.prompt, "text after BOS")->capture_default_str();
  app.add_option("--max-tokens", a.max_tokens, "tokens to generate (stops early at EOS or the context end)")
      ->check(CLI::Range(1L, long(1 << 20)))->capture_default_str();
  app.add_option("--temperature", a.temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--seed", a.seed, "sampling seed (random by default)")
      ->check(CLI::Range(0ULL, 0x7fffffffffffffffULL));
  app.add_option("--top-k", a.top_k, "0 = off")->check(CLI::Range(0L, long(1 << 30)))->capture_default_str();
  app.add_option("--top-p", a.top_p, "nucleus mass, in (0, 1]")
      ->check(CLI::PositiveNumber)->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads, 0 = all cores")->check(CLI::Range(0L, 1024L))
      ->capture_default_str();
  app.add_option("--backend", a.backend, "auto (cuda when a GPU is present, else cpu), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_flag("--enforce-eager", a.enforce_eager, "cuda: run every step eagerly (no CUDA graphs)");
  app.add_option("--tensor-parallel-size", a.tensor_parallel_size,
                 "split the model over N GPUs (NCCL) or N CPU backends (docs/TENSOR_PARALLEL.md)")
      ->check(CLI::Range(1L, 1024L))->capture_default_str();
}

int run(const Args& a) {
  const std::string model_path = a.model.empty() ? default_model_dir() : a.model;
  if (model_path.empty())
    FS_THROW("no default model found (stories260K beside the program): pass --model DIR");
  const bool one_gpu = uses_cuda({.backend = a.backend}) && a.tensor_parallel_size == 1;
  auto model = load_model(model_path, LoadOptions{.quantize = parse_quantize(a.quantize),
                                                  .fp8_in_backend = one_gpu});
  const std::string tok_path = a.tokenizer.empty() ? find_tokenizer_file(model_path) : a.tokenizer;
  auto tok = Tokenizer::load(tok_path);
  const ModelConfig& c = model->config();
  FS_CHECK(tok->vocab_size() <= c.vocab_size, "tokenizer ", tok_path, " has ", tok->vocab_size(),
           " pieces but the model only ", c.vocab_size);

  std::vector<int32_t> tokens = tok->encode(a.prompt, /*add_bos=*/true);
  const int max_model_len = c.max_model_len > 0 ? c.max_model_len : 1 << 30;
  // The prompt must leave room for the first generated token (the engine's rule).
  FS_CHECK(fits_context(int64_t(tokens.size()), 1, max_model_len), "prompt of ", tokens.size(),
           " tokens does not fit the context of ", max_model_len);
  const int budget = generation_budget(int(tokens.size()), int(a.max_tokens), max_model_len);
  const int total = int(tokens.size()) + budget;
  ModelRunnerOptions o;
  o.threads = int(a.threads);
  o.backend = a.backend;
  o.kv_cache_tokens = total;
  o.tensor_parallel_size = int(a.tensor_parallel_size);
  if (a.enforce_eager) o.graph_max_batch = 0;
  auto runner = ModelRunner::create(*model, o);
  std::vector<int32_t> blocks;
  for (int b = 0; b < runner->num_kv_blocks(); ++b) blocks.push_back(b);

  SamplingParams sp;
  sp.temperature = float(a.temperature);
  sp.top_k = int(a.top_k);
  sp.top_p = float(a.top_p);
  sp.seed = a.has_seed ? a.seed : (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  const size_t prompt_len = tokens.size();
  IncrementalDetokenizer detok(*tok, tokens);
  std::fputs(a.prompt.c_str(), stdout);
  std::fflush(stdout);

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto t_first = t0;
  std::vector<float> logits;
  int num_cached = 0;
  // The model's EOS ids and the tokenizer's own.
  std::vector<int32_t> eos(c.eos_token_ids.begin(), c.eos_token_ids.end());
  eos.push_back(tok->eos_id());
  while (int(tokens.size()) < total) {
    StepPlan batch;
    StepChunk ch;
    ch.tokens = tokens.data() + num_cached;
    ch.num_tokens = int(tokens.size()) - num_cached;
    ch.num_cached = num_cached;
    ch.block_table = &blocks;
    batch.chunks.push_back(ch);
    logits.clear();
    runner->step(batch, &logits);
    num_cached = int(tokens.size());
    SampleRequest req;
    req.params = &sp;
    req.prompt = std::span<const int32_t>(tokens).first(prompt_len);
    req.generated = std::span<const int32_t>(tokens).subspan(prompt_len);
    req.step = tokens.size() - prompt_len;
    const int32_t next = sample_token(logits, req).token;
    if (tokens.size() == prompt_len) t_first = Clock::now();
    tokens.push_back(next);
    if (is_eos(next, eos)) break;
    std::fputs(detok.push(next).c_str(), stdout);
    std::fflush(stdout);
  }
  std::fputs((detok.flush() + "\n").c_str(), stdout);
  std::fflush(stdout);  // before the stderr summary, also when both go to one pipe
  const auto t1 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t_first - t0).count();
  const double decode_s = std::chrono::duration<double>(t1 - t_first).count();
  const size_t generated = tokens.size() - prompt_len;
  std::fprintf(stderr,
               "prompt %zu tokens in %.1f ms; generated %zu tokens, %.1f tokens/s after the "
               "first (backend %s)\n",
               prompt_len, prefill_s * 1e3, generated,
               generated > 1 ? double(generated - 1) / decode_s : 0.0,
               runner->backend_name().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  CLI::App app{"Generates text from one prompt with one sequence (the simplest path through the model).",
               "flashserve-generate"};
  add_flags(app, args);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  prepare_cuda_for_tensor_parallelism(int(args.tensor_parallel_size));  // before any CUDA call
  args.has_seed = app.count("--seed") > 0;
  return cli::run_main("flashserve-generate", [&] { return run(args); });
}
