// flashserve-generate: loads a model and a tokenizer, generates from one prompt with a simple
// single-sequence loop (whole-prompt prefill, then one decode step per token, KV blocks taken
// in order), streams the text to stdout and reports tokens/s on stderr.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/stop_rules.h"
#include "model/model_runner.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"
#include "tools/cli.h"
#include "weights/model.h"

namespace fs = std::filesystem;
using namespace flashserve;

namespace {

constexpr const char* kUsage =
    "usage: flashserve-generate [--model DIR|FILE] [--tokenizer PATH] [--prompt TEXT]\n"
    "         [--max-tokens N] [--temperature T] [--seed S] [--top-k K] [--top-p P]\n"
    "         [--threads N] [--backend auto|cpu|cuda] [--enforce-eager]\n"
    "  --model       HF folder or llama2.c .bin (default ../shared/models/stories260K)\n"
    "  --tokenizer   tokenizer.json or SentencePiece .model (default: beside the model)\n"
    "  --prompt      text after BOS (default \"Once upon a time\")\n"
    "  --max-tokens  tokens to generate (default 256; stops early at EOS or the context end)\n"
    "  --temperature 0 = greedy (default 1)   --seed  random by default\n"
    "  --top-k       0 = off (default)        --top-p (0, 1], default 1\n"
    "  --threads     CPU threads, 0 = all cores (default)\n"
    "  --backend     auto (cuda when a GPU is present, else cpu; default), cpu or cuda\n"
    "  --enforce-eager  cuda: run every step eagerly (no CUDA graphs)\n";

struct Args {
  std::string model, tokenizer, prompt = "Once upon a time", backend = "auto";
  long max_tokens = 256, top_k = 0, threads = 0;
  bool enforce_eager = false;
  double temperature = 1.0, top_p = 1.0;
  unsigned long long seed = 0;
  bool has_seed = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  cli::usage_error("flashserve-generate", msg, kUsage);
}

long parse_long(const std::string& flag, const std::string& v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < lo || x > hi)
    usage_error(flag + " wants an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "], got '" + v + "'");
  return x;
}

double parse_double(const std::string& flag, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= lo && x <= hi))
    usage_error(str_cat(flag, " wants a number in [", lo, ", ", hi, "], got '", v, "'"));
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  const char* prog = "flashserve-generate";
  cli::parse_flags(argc, argv, prog, kUsage, {"--enforce-eager"}, [&](const std::string& f,
                                                                      const std::string& v) {
    if (f == "--enforce-eager")
      a.enforce_eager = true;
    else if (f == "--model")
      a.model = v;
    else if (f == "--tokenizer")
      a.tokenizer = v;
    else if (f == "--prompt")
      a.prompt = v;
    else if (f == "--max-tokens")
      a.max_tokens = parse_long(f, v, 1, 1 << 20);
    else if (f == "--temperature")
      a.temperature = parse_double(f, v, 0.0, 100.0);
    else if (f == "--seed")
      a.seed = parse_long(f, v, 0, 0x7fffffffffffffffL), a.has_seed = true;
    else if (f == "--top-k")
      a.top_k = parse_long(f, v, 0, 1 << 30);
    else if (f == "--top-p") {
      a.top_p = parse_double(f, v, 0.0, 1.0);
      if (a.top_p <= 0.0) usage_error("--top-p must be > 0");
    } else if (f == "--threads")
      a.threads = parse_long(f, v, 0, 1024);
    else if (f == "--backend") {
      if (v != "auto" && v != "cpu" && v != "cuda") usage_error("--backend must be auto, cpu or cuda");
      a.backend = v;
    } else
      return false;
    return true;
  });
  return a;
}

// ../shared/models/stories260K from the current directory, else from the executable's repo
// (the first ancestor folder of the executable that has it beside).
std::string default_model() {
  const fs::path rel = fs::path("..") / "shared" / "models" / "stories260K";
  if (fs::exists(rel)) return rel.string();
  std::error_code ec;
  fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (; !ec && !dir.empty() && dir != dir.root_path(); dir = dir.parent_path())
    if (fs::exists(dir / rel)) return (dir / rel).lexically_normal().string();
  return rel.string();  // load_model will name it in its error
}

int run(const Args& a) {
  const std::string model_path = a.model.empty() ? default_model() : a.model;
  auto model = load_model(model_path);
  const std::string tok_path = a.tokenizer.empty() ? find_tokenizer_file(model_path) : a.tokenizer;
  auto tok = Tokenizer::load(tok_path);
  const ModelConfig& c = model->config();
  FS_CHECK(tok->vocab_size() <= c.vocab_size, "tokenizer ", tok_path, " has ", tok->vocab_size(),
           " pieces but the model only ", c.vocab_size);

  std::vector<int32_t> tokens = tok->encode(a.prompt, /*add_bos=*/true);
  const int max_len = c.max_position_embeddings > 0 ? c.max_position_embeddings : 1 << 30;
  FS_CHECK(int(tokens.size()) < max_len, "prompt of ", tokens.size(),
           " tokens does not fit the context of ", max_len);
  const int budget = generation_budget(int(tokens.size()), int(a.max_tokens), max_len);
  const int total = int(tokens.size()) + budget;
  ModelRunnerOptions o;
  o.threads = int(a.threads);
  o.backend = a.backend;
  o.kv_cache_tokens = total;
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
  const Args args = parse_args(argc, argv);
  return cli::run_main("flashserve-generate", [&] { return run(args); });
}
