// The `flashserve` binary: parses flags, loads the model and tokenizer, starts the Engine and the
// HTTP server, and shuts down cleanly on SIGINT/SIGTERM (exit 0) or on an engine fault (exit 1).
// Exit codes: 0 clean shutdown (and --help), 1 start-up failure or engine fault, 2 usage error.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>

#include "chat/chat_template.h"
#include "cli/cli.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"
#include "weights/default_model.h"
#include "weights/model.h"

namespace fs = std::filesystem;
using namespace flashserve;

namespace {

// A signal delivered to a thread that does not block it (see main). Lock-free, so async-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

struct Flags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model, tokenizer, served_model_name, api_key, backend = "auto", chat_template;
  int max_num_seqs = EngineOptions{}.max_num_seqs;
  int max_num_batched_tokens = EngineOptions{}.max_num_batched_tokens;
  int max_queue = EngineOptions{}.max_queue;
  int64_t kv_cache_tokens = 0;
  double kv_memory_fraction = ModelRunnerOptions{}.kv_memory_fraction;
  int64_t max_body_bytes = 4 << 20;
  int threads = 0, block_size = 16, http_threads = 0, tensor_parallel_size = 1;
  int cuda_graph_max_batch = ModelRunnerOptions{}.graph_max_batch;
  bool log_requests = true;
  bool prefix_caching = true;
  bool enforce_eager = false;  // no CUDA graphs, whatever --cuda-graph-max-batch says
  ConnectionLimits limits;
};

const char* kAbout = R"(An OpenAI-compatible server (POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
/health, /metrics).)";

const char* kFooter = R"(
Exit status: 0 after SIGINT/SIGTERM (or --help), 1 when start-up fails or the engine dies,
2 for a usage error (unknown flag, bad value).)";

constexpr int kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A number in [lo, hi], checked by CLI11 (a usage error otherwise). The range is in the
// option's own text, so the validator's description is left out of the help.
template <typename T>
CLI::Validator in_range(T lo, T hi) {
  return CLI::Range(lo, hi).description("");
}

// A number in (0, 1] (CLI::Range would take 0).
const CLI::Validator kFraction(
    [](std::string& v) {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      return !v.empty() && *end == '\0' && x > 0 && x <= 1 ? "" : "Value " + v + " not in (0, 1]";
    },
    "");

// The option table: every flag, its range and its help text (cli/cli.h conventions: --help exits
// 0, a usage error 2). Defaults are the Flags' initial values, stated in the help text.
void add_flags(CLI::App& app, Flags& f) {
  app.add_option("--model", f.model,
                 "model directory (HF safetensors or llama2.c .bin) or .bin file\n"
                 "(default: ../shared/models/stories260K when it exists)")->type_name("PATH");
  app.add_option("--tokenizer", f.tokenizer,
                 "tokenizer.json or SentencePiece .model (default: tokenizer.json,\n"
                 "else tokenizer.model, beside the weights)")->type_name("PATH");
  app.add_option("--chat-template", f.chat_template,
                 "the chat template for /v1/chat/completions, overriding the model's\n"
                 "own (tokenizer_config.json or chat_template.jinja): a Jinja file or a\n"
                 "built-in name: llama-2, llama-3, chatml, mistral, zephyr. A template\n"
                 "that does not parse stops start-up (exit 1)")
      ->type_name("FILE|NAME")
      ->check(CLI::Validator(
          [](std::string& v) { return v.empty() ? "needs a file or a built-in name" : ""; }, ""));
  app.add_option("--served-model-name", f.served_model_name,
                 "the id clients pass as \"model\" (default: the model's folder name)")
      ->type_name("NAME");
  app.add_option("--host", f.host, "listen address (default 127.0.0.1)")->type_name("ADDR");
  app.add_option("--port", f.port, "listen port, 0..65535 (default 8000; 0 = any free port, printed)")
      ->type_name("N")->check(in_range(0, 65535));
  app.add_option("--api-key", f.api_key,
                 "require \"Authorization: Bearer KEY\" (default: env FLASHSERVE_API_KEY;\n"
                 "/health is exempt; the key is never logged)")->type_name("KEY");
  app.add_option("--backend", f.backend, "compute backend (default auto: cuda when available)")
      ->type_name("cpu|cuda|auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}).description(""));
  app.add_option("--threads", f.threads, "CPU backend worker threads (default 0 = all cores)")
      ->type_name("N")->check(in_range(0, kIntMax));
  app.add_option("--tensor-parallel-size", f.tensor_parallel_size,
                 "split the model over N GPUs 0..N-1 (NCCL), or N CPU backends\n"
                 "sharing --threads; N must divide the heads, intermediate size and\n"
                 "vocabulary (docs/TENSOR_PARALLEL.md; default 1)")
      ->type_name("N")->check(in_range(1, 1024));
  app.add_option("--block-size", f.block_size, "tokens per KV-cache block (default 16)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--kv-cache-tokens", f.kv_cache_tokens,
                 "KV-cache capacity in tokens (default 0 = from --kv-memory-fraction)")
      ->type_name("N")->check(in_range(int64_t{0}, kInt64Max));
  app.add_option("--kv-memory-fraction", f.kv_memory_fraction,
                 "fraction of free device memory for the KV cache, in (0, 1] (default 0.9)")
      ->type_name("F")->check(kFraction);
  app.add_option("--max-num-seqs", f.max_num_seqs, "sequences running per engine step (default 64)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-num-batched-tokens", f.max_num_batched_tokens,
                 "tokens per engine step (default 512)")->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-queue", f.max_queue,
                 "waiting requests, >= 1 (default 256); beyond it requests get 503 +\n"
                 "Retry-After; a request with more choices (prompts x n) gets 400")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-body-bytes", f.max_body_bytes,
                 "request body limit; larger bodies get 413 (default 4194304)")
      ->type_name("N")->check(in_range(int64_t{1}, kInt64Max));
  app.add_option("--http-threads", f.http_threads,
                 "HTTP handler threads (default max-num-seqs + max-queue + 8); when\n"
                 "all are busy a new request gets 503 + Retry-After")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--request-head-timeout-ms", f.limits.head_timeout_ms,
                 "a request head must arrive whole within N ms of its first byte\n"
                 "(default 3000); else 408 and the connection is closed")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--request-body-timeout-ms", f.limits.body_timeout_ms,
                 "and its body within N ms of the head (default 30000)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--keep-alive-timeout-ms", f.limits.idle_timeout_ms,
                 "a connection with no request under way closes after N ms (default 5000)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-connections", f.limits.max_connections,
                 "open connections in all (default 4096, at most the open-file limit\n"
                 "less 64); beyond: 503 and close")->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-connections-per-client", f.limits.max_connections_per_client,
                 "open connections from one address (default 256; 0 = no cap);\n"
                 "beyond: 503 and close. Behind a reverse proxy every connection\n"
                 "comes from the proxy's address: raise it or use 0")
      ->type_name("N")->check(in_range(0, kIntMax));
  app.add_option("--cuda-graph-max-batch", f.cuda_graph_max_batch,
                 "cuda: decode steps of up to N sequences replay CUDA graphs\n"
                 "(default 256; 0 = off)")->type_name("N")->check(in_range(0, kIntMax));
  app.add_flag("--enforce-eager", f.enforce_eager,
               "cuda: no CUDA graphs (same as --cuda-graph-max-batch 0)");
  app.add_flag_callback("--no-prefix-caching", [&f] { f.prefix_caching = false; },
                        "compute every prompt in full (default: reuse the KV cache of\n"
                        "prompt prefixes already seen, docs/PREFIX_CACHE.md)");
  app.add_flag_callback("--no-request-log", [&f] { f.log_requests = false; },
                        "do not log one line per finished request");
}

// Parses the command line. Returns -1 to go on, else main's exit status (0 after --help, 2 after
// a usage error).
int parse_flags(int argc, char** argv, Flags& f) {
  if (const char* key = std::getenv("FLASHSERVE_API_KEY")) f.api_key = key;
  CLI::App app{kAbout, "flashserve"};
  app.footer(kFooter);
  app.get_formatter()->column_width(32);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last one wins
  add_flags(app, f);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (f.enforce_eager) f.cuda_graph_max_batch = 0;
  if (f.model.empty()) {  // beside the program, not the working directory (weights/default_model.h)
    f.model = default_model_dir();
    if (f.model.empty()) {
      return cli::usage_error(app, "--model is required (no stories260K beside the program)");
    }
  }
  if (f.http_threads == 0) f.http_threads = std::min(f.max_num_seqs + f.max_queue + 8, 2048);
  return -1;
}

// --chat-template, else the model folder's own template (nullptr: none). bos/eos text for the
// template falls back to the tokenizer's pieces (llama2.c checkpoints have no tokenizer_config).
std::shared_ptr<const ChatTemplate> load_chat_template(const Flags& flags, const Tokenizer& tok) {
  const std::string bos = tok.bos_id() >= 0 ? tok.piece(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.piece(tok.eos_id()) : "";
  if (!flags.chat_template.empty()) {
    return std::make_shared<ChatTemplate>(ChatTemplate::from_flag(flags.chat_template, bos, eos));
  }
  const fs::path p(flags.model);
  const std::string dir = fs::is_directory(p) ? p.string() : p.parent_path().string();
  auto t = ChatTemplate::from_model_dir(dir.empty() ? "." : dir, bos, eos);
  return t ? std::make_shared<ChatTemplate>(std::move(*t)) : nullptr;
}

// The model's generation_config.json sampling defaults over the API's defaults.
SamplingParams sampling_defaults(const GenerationDefaults& g) {
  SamplingParams s;
  if (g.temperature) s.temperature = *g.temperature;
  if (g.top_p) s.top_p = *g.top_p;
  if (g.top_k) s.top_k = *g.top_k;
  if (g.repetition_penalty) s.repetition_penalty = *g.repetition_penalty;
  return s;
}

std::string default_model_name(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.extension() == ".bin" ? p.stem().string() : p.filename().string();
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (const int rc = parse_flags(argc, argv, flags); rc >= 0) return rc;

  // Signals are taken by one watcher thread (sigtimedwait); every thread started from here on
  // blocks them. A thread started before main (ThreadSanitizer's, or a library's) does not, and
  // the default action there would kill the process: the handler turns such a delivery into a
  // flag the watcher reads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  struct sigaction on_signal {};
  on_signal.sa_handler = [](int sig) { g_signal.store(sig); };
  sigemptyset(&on_signal.sa_mask);
  on_signal.sa_flags = SA_RESTART;
  sigaction(SIGINT, &on_signal, nullptr);
  sigaction(SIGTERM, &on_signal, nullptr);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished client must not kill the server

  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::shared_ptr<const ChatTemplate> chat_template;
  try {
    std::unique_ptr<LoadedModel> model = load_model(flags.model);
    // tokenizer.json, else tokenizer.model, beside the weights (the error lists what was tried).
    const std::string tok_path =
        flags.tokenizer.empty() ? find_tokenizer_file(flags.model) : flags.tokenizer;
    tokenizer = Tokenizer::load(tok_path);
    model->use_tokenizer_eos(tokenizer->eos_id());
    chat_template = load_chat_template(flags, *tokenizer);
    ModelRunnerOptions ro;
    ro.backend = flags.backend;
    ro.block_size = flags.block_size;
    ro.kv_cache_tokens = flags.kv_cache_tokens;
    ro.kv_memory_fraction = flags.kv_memory_fraction;
    ro.threads = flags.threads;
    ro.graph_max_batch = flags.cuda_graph_max_batch;
    ro.tensor_parallel_size = flags.tensor_parallel_size;
    auto runner = ModelRunner::create(*model, ro);
    // The runner holds its own copy of the weights (CPU: fp32 buffers; CUDA: device memory) and
    // of the config, so the memory-mapped files can go now instead of staying mapped for good.
    model.reset();
    EngineOptions eo;
    eo.max_num_seqs = flags.max_num_seqs;
    eo.max_num_batched_tokens = flags.max_num_batched_tokens;
    eo.max_queue = flags.max_queue;
    eo.enable_prefix_caching = flags.prefix_caching;
    engine = Engine::create(std::move(runner), eo);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashserve: start-up failed: %s\n", e.what());
    return 1;
  }

  const ModelConfig& c = engine->config();
  const ModelRunner& r = engine->runner();
  ServedModel served;
  served.id = flags.served_model_name.empty() ? default_model_name(flags.model)
                                              : flags.served_model_name;
  served.max_model_len = c.max_position_embeddings;
  served.vocab_size = c.vocab_size;
  served.created = static_cast<int64_t>(std::time(nullptr));
  served.kv_cache_tokens = int64_t(r.num_kv_blocks()) * r.block_size();
  served.sampling_defaults = sampling_defaults(c.generation);
  served.chat_template = chat_template;
  std::fprintf(stderr,
               "flashserve: model %s (%s): %d layers, hidden %d, intermediate %d, heads %d/%d "
               "(q/kv), head_dim %d, vocab %d, context %d\n"
               "flashserve: backend %s; KV cache %d blocks x %d tokens = %lld tokens; "
               "max_num_seqs %d, max_num_batched_tokens %d, max_queue %d, prefix caching %s\n",
               served.id.c_str(), flags.model.c_str(), c.num_layers, c.hidden_size,
               c.intermediate_size, c.num_q_heads, c.num_kv_heads, c.head_dim, c.vocab_size,
               c.max_position_embeddings, r.backend_name().c_str(), r.num_kv_blocks(),
               r.block_size(), static_cast<long long>(r.num_kv_blocks()) * r.block_size(),
               flags.max_num_seqs, flags.max_num_batched_tokens, flags.max_queue,
               flags.prefix_caching ? "on" : "off");
  std::string eos_list;
  for (int id : c.eos_token_ids) {
    if (!eos_list.empty()) eos_list += ',';
    eos_list += std::to_string(id);
  }
  const SamplingParams& d = served.sampling_defaults;
  std::fprintf(stderr,
               "flashserve: eos ids [%s]; sampling defaults (generation_config.json over the API's):"
               " temperature %g, top_p %g, top_k %d, repetition_penalty %g\n"
               "flashserve: chat template: %s\n",
               eos_list.c_str(), d.temperature, d.top_p, d.top_k, d.repetition_penalty,
               chat_template ? chat_template->origin().c_str()
                             : "none (/v1/chat/completions answers 400; see --chat-template)");

  HttpServerOptions ho;
  ho.host = flags.host;
  ho.port = flags.port;
  ho.api_key = flags.api_key;
  ho.max_body_bytes = static_cast<size_t>(flags.max_body_bytes);
  ho.threads = flags.http_threads;
  ho.log_requests = flags.log_requests;
  ho.limits = flags.limits;
  // Every connection is a descriptor: take the hard open-file limit (the soft one is often
  // 1024) and keep the connection cap 64 below it for the model files, logs and the listener.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
    getrlimit(RLIMIT_NOFILE, &nofile);
    const int usable = int(std::min<rlim_t>(nofile.rlim_cur, 1 << 20)) - 64;
    if (ho.limits.max_connections > usable) {
      std::fprintf(stderr, "flashserve: --max-connections %d lowered to %d (open-file limit %llu)\n",
                   ho.limits.max_connections, std::max(usable, 1),
                   static_cast<unsigned long long>(nofile.rlim_cur));
      ho.limits.max_connections = std::max(usable, 1);
    }
  }
  HttpServer server(*engine, *tokenizer, served, ho);
  if (!server.bind()) {
    engine->shutdown();
    return 1;
  }
  std::printf("flashserve: listening on http://%s:%d%s\n", flags.host.c_str(), server.port(),
              flags.api_key.empty() ? "" : " (API key required)");
  std::fflush(stdout);

  std::atomic<bool> done{false};
  int exit_code = 0;
  std::thread watcher([&] {
    const timespec tick{0, 100 * 1000 * 1000};
    while (!done.load()) {
      int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig <= 0) sig = g_signal.exchange(0);
      bool failed = engine->failed();
      if (sig <= 0 && !failed) continue;
      if (failed) {
        std::fprintf(stderr, "flashserve: the engine failed; shutting down\n");
        exit_code = 1;
      } else {
        std::fprintf(stderr, "flashserve: signal %d; finishing in-flight requests and exiting\n", sig);
      }
      server.set_draining();  // new requests: 503
      engine->shutdown();     // in-flight requests end (aborted) and their handlers return
      server.stop();
      return;
    }
  });
  server.run();
  done = true;
  watcher.join();
  engine->shutdown();
  std::fprintf(stderr, "flashserve: stopped\n");
  return exit_code;
}
