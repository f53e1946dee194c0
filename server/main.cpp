// The `flashserve` binary: parses flags, loads the model and tokenizer, starts the Engine and the
// HTTP server, and shuts down cleanly on SIGINT/SIGTERM (exit 0) or on an engine fault (exit 1).
// Exit codes: 0 clean shutdown (and --help), 1 start-up failure or engine fault, 2 usage error.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>

#include "chat/chat_template.h"
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
  int threads = 0, block_size = 16, http_threads = 0;
  int cuda_graph_max_batch = ModelRunnerOptions{}.graph_max_batch;
  bool log_requests = true;
  bool prefix_caching = true;
  ConnectionLimits limits;
};

const char* kHelp = R"(usage: flashserve [--model DIR] [options]
An OpenAI-compatible server (POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
/health, /metrics).

  --model PATH               model directory (HF safetensors or llama2.c .bin) or .bin file
                             (default: ../shared/models/stories260K when it exists)
  --tokenizer PATH           tokenizer.json or SentencePiece .model (default: tokenizer.json,
                             else tokenizer.model, beside the weights)
  --chat-template FILE|NAME  the chat template for /v1/chat/completions, overriding the model's
                             own (tokenizer_config.json or chat_template.jinja): a Jinja file or a
                             built-in name: llama-2, llama-3, chatml, mistral, zephyr. A template
                             that does not parse stops start-up (exit 1)
  --served-model-name NAME   the id clients pass as "model" (default: the model's folder name)
  --host ADDR                listen address (default 127.0.0.1)
  --port N                   listen port, 0..65535 (default 8000; 0 = any free port, printed)
  --api-key KEY              require "Authorization: Bearer KEY" (default: env FLASHSERVE_API_KEY;
                             /health is exempt; the key is never logged)
  --backend cpu|cuda|auto    compute backend (default auto: cuda when available)
  --threads N                CPU backend worker threads (default 0 = all cores)
  --block-size N             tokens per KV-cache block (default 16)
  --kv-cache-tokens N        KV-cache capacity in tokens (default 0 = from --kv-memory-fraction)
  --kv-memory-fraction F     fraction of free device memory for the KV cache (default 0.9)
  --max-num-seqs N           sequences running per engine step (default 64)
  --max-num-batched-tokens N tokens per engine step (default 512)
  --max-queue N              waiting requests, >= 1 (default 256); beyond it requests get 503 +
                             Retry-After; a request with more choices (prompts x n) gets 400
  --max-body-bytes N         request body limit; larger bodies get 413 (default 4194304)
  --http-threads N           HTTP handler threads (default max-num-seqs + max-queue + 8); when
                             all are busy a new request gets 503 + Retry-After
  --request-head-timeout-ms N   a request head must arrive whole within N ms of its first byte
                             (default 3000); else 408 and the connection is closed
  --request-body-timeout-ms N   and its body within N ms of the head (default 30000)
  --keep-alive-timeout-ms N  a connection with no request under way closes after N ms (default 5000)
  --max-connections N        open connections in all (default 4096, at most the open-file limit
                             less 64); beyond: 503 and close
  --max-connections-per-client N  open connections from one address (default 256; 0 = no cap);
                             beyond: 503 and close. Behind a reverse proxy every connection
                             comes from the proxy's address: raise it or use 0
  --cuda-graph-max-batch N   cuda: decode steps of up to N sequences replay CUDA graphs
                             (default 256; 0 = off)
  --enforce-eager            cuda: no CUDA graphs (same as --cuda-graph-max-batch 0)
  --no-prefix-caching        compute every prompt in full (default: reuse the KV cache of
                             prompt prefixes already seen, docs/PREFIX_CACHE.md)
  --no-request-log           do not log one line per finished request
  --help                     this text

Exit status: 0 after SIGINT/SIGTERM (or --help), 1 when start-up fails or the engine dies,
2 for a usage error (unknown flag, bad value).
)";

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "flashserve: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

// A whole number in [lo, hi]; anything else is a usage error (exit 2).
int64_t to_int(const std::string& flag, const std::string& v, int64_t lo,
               int64_t hi = std::numeric_limits<int>::max()) {
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < lo || x > hi) {
    usage_error("bad value for " + flag + ": '" + v + "' (a whole number in [" +
                std::to_string(lo) + ", " + std::to_string(hi) + "])");
  }
  return x;
}

Flags parse_flags(int argc, char** argv) {
  Flags f;
  if (const char* key = std::getenv("FLASHSERVE_API_KEY")) f.api_key = key;
  std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--host", [&](const std::string& v) { f.host = v; }},
      {"--port", [&](const std::string& v) { f.port = int(to_int("--port", v, 0, 65535)); }},
      {"--model", [&](const std::string& v) { f.model = v; }},
      {"--tokenizer", [&](const std::string& v) { f.tokenizer = v; }},
      {"--served-model-name", [&](const std::string& v) { f.served_model_name = v; }},
      {"--chat-template", [&](const std::string& v) {
         if (v.empty()) usage_error("--chat-template needs a file or a built-in name");
         f.chat_template = v;
       }},
      {"--api-key", [&](const std::string& v) { f.api_key = v; }},
      {"--backend", [&](const std::string& v) {
         if (v != "cpu" && v != "cuda" && v != "auto") usage_error("--backend must be cpu|cuda|auto");
         f.backend = v;
       }},
      {"--threads", [&](const std::string& v) { f.threads = int(to_int("--threads", v, 0)); }},
      {"--block-size", [&](const std::string& v) { f.block_size = int(to_int("--block-size", v, 1)); }},
      {"--kv-cache-tokens", [&](const std::string& v) { f.kv_cache_tokens = to_int("--kv-cache-tokens", v, 0, kInt64Max); }},
      {"--kv-memory-fraction", [&](const std::string& v) {
         char* end = nullptr;
         f.kv_memory_fraction = std::strtod(v.c_str(), &end);
         if (*end || !(f.kv_memory_fraction > 0 && f.kv_memory_fraction <= 1)) {
           usage_error("--kv-memory-fraction must be in (0, 1]");
         }
       }},
      {"--max-num-seqs", [&](const std::string& v) { f.max_num_seqs = int(to_int("--max-num-seqs", v, 1)); }},
      {"--max-num-batched-tokens", [&](const std::string& v) {
         f.max_num_batched_tokens = int(to_int("--max-num-batched-tokens", v, 1));
       }},
      {"--max-queue", [&](const std::string& v) { f.max_queue = int(to_int("--max-queue", v, 1)); }},
      {"--max-body-bytes", [&](const std::string& v) { f.max_body_bytes = to_int("--max-body-bytes", v, 1, kInt64Max); }},
      {"--http-threads", [&](const std::string& v) { f.http_threads = int(to_int("--http-threads", v, 1)); }},
      {"--request-head-timeout-ms", [&](const std::string& v) {
         f.limits.head_timeout_ms = int(to_int("--request-head-timeout-ms", v, 1));
       }},
      {"--request-body-timeout-ms", [&](const std::string& v) {
         f.limits.body_timeout_ms = int(to_int("--request-body-timeout-ms", v, 1));
       }},
      {"--keep-alive-timeout-ms", [&](const std::string& v) {
         f.limits.idle_timeout_ms = int(to_int("--keep-alive-timeout-ms", v, 1));
       }},
      {"--max-connections", [&](const std::string& v) {
         f.limits.max_connections = int(to_int("--max-connections", v, 1));
       }},
      {"--max-connections-per-client", [&](const std::string& v) {
         f.limits.max_connections_per_client = int(to_int("--max-connections-per-client", v, 0));
       }},
      {"--cuda-graph-max-batch", [&](const std::string& v) {
         f.cuda_graph_max_batch = int(to_int("--cuda-graph-max-batch", v, 0));
       }},
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kHelp, stdout);
      std::exit(0);
    }
    if (arg == "--no-request-log") {
      f.log_requests = false;
      continue;
    }
    if (arg == "--no-prefix-caching") {
      f.prefix_caching = false;
      continue;
    }
    if (arg == "--enforce-eager") {
      f.cuda_graph_max_batch = 0;
      continue;
    }
    size_t eq = arg.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto it = with_value.find(arg);
    if (it == with_value.end()) usage_error("unknown flag '" + arg + "'");
    if (!inline_value) {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      value = argv[++i];
    }
    it->second(value);
  }
  if (f.model.empty()) {  // beside the program, not the working directory (weights/default_model.h)
    f.model = default_model_dir();
    if (f.model.empty()) usage_error("--model is required (no stories260K beside the program)");
  }
  if (f.http_threads == 0) f.http_threads = std::min(f.max_num_seqs + f.max_queue + 8, 2048);
  return f;
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
  Flags flags = parse_flags(argc, argv);

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
