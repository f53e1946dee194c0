// The `flashserve` binary's command line (see server/flags.h).
#include "server/flags.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>

#include "cli/cli.h"
#include "core/error.h"
#include "server/http/cors.h"
#include "speculative/ngram_proposer.h"
#include "weights/default_model.h"

namespace flashserve {
namespace {

// The first line lists every route of server/http_server.cpp (tests/tools/check_doc_maps.py checks it).
const char* kAbout = R"(An OpenAI-compatible server: POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings; GET|DELETE /v1/responses/{id}; GET /v1/models, /v1/models/{id}; POST /tokenize, /detokenize; GET /health, /metrics.)";

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
void add_flags(CLI::App& app, ServerFlags& f) {
  app.add_option("--model", f.model,
                 "model directory (HF safetensors or llama2.c .bin) or .bin file\n"
                 "(default: ../shared/models/stories260K when it exists)")->type_name("PATH");
  cli::add_quantize_flag(app, f.quantize);
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
  app.add_option("--tool-call-parser", f.tool_call_parser,
                 "how tool calls in the output are parsed: auto (from the chat template, or\n"
                 "harmony for gpt-oss), hermes, llama3_json, mistral, harmony (gpt-oss's channels:\n"
                 "reasoning, calls and answer) or none (docs/TOOL_CALLING.md)")
      ->type_name("NAME")
      ->check(CLI::IsMember({"auto", "hermes", "llama3_json", "mistral", "harmony", "none"}));
  app.add_option("--reasoning-parser", f.reasoning_parser,
                 "split <think>...</think> out of chat output into reasoning_content:\n"
                 "auto (when the chat template uses <think>), deepseek_r1, qwen3 or none")
      ->type_name("NAME")
      ->check(CLI::IsMember({"auto", "deepseek_r1", "qwen3", "none"}));
  app.add_option("--task", f.task,
                 "what the model serves: generate (completions, chat, responses), embed\n"
                 "(/v1/embeddings: last-token pooling, L2-normalised) or auto (default:\n"
                 "embed when the folder's sentence-transformers modules.json has a\n"
                 "Pooling module, else generate)")
      ->type_name("TASK")
      ->check(CLI::IsMember({"auto", "generate", "embed"}));
  app.add_option("--served-model-name", f.served_model_name,
                 "the id clients pass as \"model\" (default: the model's folder name)")
      ->type_name("NAME");
  app.add_option("--host", f.http.host, "listen address (default 127.0.0.1)")->type_name("ADDR");
  app.add_option("--port", f.http.port, "listen port, 0..65535 (default 8000; 0 = any free port, printed)")
      ->type_name("N")->check(in_range(0, 65535));
  app.add_option("--api-key", f.http.api_key,
                 "require \"Authorization: Bearer KEY\" (default: env FLASHSERVE_API_KEY;\n"
                 "/health is exempt, /metrics with --metrics-public; the key is never\n"
                 "logged)")->type_name("KEY");
  app.add_flag("--metrics-public", f.http.metrics_public,
               "serve /metrics without the API key (for a Prometheus scraper)");
  app.add_flag("--enable-force-include-usage", f.http.force_include_usage,
               "end every streamed completion and chat completion with the usage chunk,\n"
               "as if stream_options.include_usage were true (/v1/responses streams\n"
               "always end with usage)");
  app.add_option("--allowed-origins", f.allowed_origins,
                 "CORS: browser origins allowed to call the API, comma-separated\n"
                 "(\"https://app.example.com,http://localhost:3000\") or '*' (default none)")
      ->type_name("LIST")
      ->check([](const std::string& v) {
        try {
          (void)CorsPolicy(v);
          return std::string();
        } catch (const Error& e) {
          return std::string(e.what());
        }
      });
  app.add_option("--backend", f.runner.backend, "compute backend (default auto: cuda when available)")
      ->type_name("cpu|cuda|auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}).description(""));
  app.add_option("--threads", f.runner.threads, "CPU backend worker threads (default 0 = all cores)")
      ->type_name("N")->check(in_range(0, kIntMax));
  app.add_option("--tensor-parallel-size", f.runner.tensor_parallel_size,
                 "split the model over N GPUs 0..N-1 (NCCL), or N CPU backends\n"
                 "sharing --threads; N must divide the heads, intermediate size and\n"
                 "vocabulary (docs/TENSOR_PARALLEL.md; default 1)")
      ->type_name("N")->check(in_range(1, 1024));
  app.add_option("--block-size", f.runner.block_size, "tokens per KV-cache block (default 16)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--kv-cache-tokens", f.runner.kv_cache_tokens,
                 "KV-cache capacity in tokens (default 0 = from --kv-memory-fraction)")
      ->type_name("N")->check(in_range(int64_t{0}, kInt64Max));
  app.add_option("--kv-memory-fraction", f.runner.kv_memory_fraction,
                 "fraction of free device memory for the KV cache, in (0, 1] (default 0.9)")
      ->type_name("F")->check(kFraction);
  // Both default to 0: sized at start-up (server/serving_defaults.h, docs/SERVER.md).
  app.add_option("--max-num-seqs", f.engine.max_num_seqs, "sequences running per engine step "
                 "(default: sized from the KV cache on CUDA, 64 on the CPU)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-num-batched-tokens", f.engine.max_num_batched_tokens, "tokens per "
                 "engine step (default: sized from the KV cache on CUDA, 512 on the CPU)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-queue", f.engine.max_queue,
                 "waiting requests, >= 1 (default 256); beyond it requests get 503 +\n"
                 "Retry-After; a request with more choices (prompts x n) gets 400")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-body-bytes", f.http.max_body_bytes,
                 "request body limit; larger bodies get 413 (default 4194304)")
      ->type_name("N")->check(in_range(size_t{1}, size_t{kInt64Max}));
  app.add_option("--http-threads", f.http.threads,
                 "HTTP handler threads (default max-num-seqs + max-queue + 8); when\n"
                 "all are busy a new request gets 503 + Retry-After")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--request-head-timeout-ms", f.http.limits.head_timeout_ms,
                 "a request head must arrive whole within N ms of its first byte\n"
                 "(default 3000); else 408 and the connection is closed")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--request-body-timeout-ms", f.http.limits.body_timeout_ms,
                 "and its body within N ms of the head (default 30000)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--keep-alive-timeout-ms", f.http.limits.idle_timeout_ms,
                 "a connection with no request under way closes after N ms (default 5000)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-connections", f.http.limits.max_connections,
                 "open connections in all (default 4096, at most the open-file limit\n"
                 "less 64); beyond: 503 and close")->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--max-connections-per-client", f.http.limits.max_connections_per_client,
                 "open connections from one address (default 256; 0 = no cap);\n"
                 "beyond: 503 and close. Behind a reverse proxy every connection\n"
                 "comes from the proxy's address: raise it or use 0")
      ->type_name("N")->check(in_range(0, kIntMax));
  app.add_option("--drain-timeout", f.drain_timeout_s,
                 "on SIGINT/SIGTERM, seconds in-flight requests may take to finish\n"
                 "while new ones get 503 (default 0: abort them at once). Keep it\n"
                 "below the orchestrator's grace period (docs/DEPLOY.md)")
      ->type_name("S")->check(in_range(0.0, 86400.0));
  // Several hosts, named as torchrun names them (docs/DEPLOY.md).
  app.add_option("--nnodes", f.group.nnodes,
                 "hosts running this model together, one process each with its\n"
                 "--tensor-parallel-size ranks (default 1); node 0 serves HTTP, the\n"
                 "others run its steps. Needs FLASHSERVE_GROUP_TOKEN on every node")
      ->type_name("N")->check(in_range(1, 1024));
  app.add_option("--node-rank", f.group.node_rank, "this host's place in 0..nnodes-1 (default 0)")
      ->type_name("N")->check(in_range(0, 1023));
  app.add_option("--master-addr", f.group.master_addr,
                 "node 0's address, where the nodes meet (default 127.0.0.1)")->type_name("HOST");
  app.add_option("--master-port", f.group.master_port, "node 0's rendezvous port (default 29500)")
      ->type_name("PORT")->check(in_range(1, 65535));
  app.add_option_function<double>(
         "--rendezvous-timeout",
         [&f](double s) { f.group.rendezvous_timeout = std::chrono::milliseconds(int64_t(s * 1000)); },
         "seconds for every node to join; then start-up fails (default 120)")
      ->type_name("S")->check(in_range(1.0, 86400.0));
  app.add_option_function<double>(
         "--heartbeat-timeout",
         [&f](double s) { f.group.heartbeat_timeout = std::chrono::milliseconds(int64_t(s * 1000)); },
         "seconds of silence from a node that fail the group (default 10)")
      ->type_name("S")->check(in_range(0.2, 3600.0));
  app.add_option("--cuda-graph-max-batch", f.runner.graph_max_batch,
                 "cuda: decode steps of up to N sequences replay CUDA graphs\n"
                 "(default 256; 0 = off)")->type_name("N")->check(in_range(0, kIntMax));
  app.add_flag("--enforce-eager", f.enforce_eager,
               "cuda: no CUDA graphs (same as --cuda-graph-max-batch 0)");
  app.add_flag_callback("--no-prefix-caching", [&f] { f.engine.enable_prefix_caching = false; },
                        "compute every prompt in full (default: reuse the KV cache of\n"
                        "prompt prefixes already seen, docs/PREFIX_CACHE.md)");
  app.add_option("--speculative", f.speculative,
                 "speculative decoding: off; ngram (drafts looked up in the\n"
                 "request's own tokens); draft (a small model of the same\n"
                 "vocabulary, --draft-model, proposes). The output is the same\n"
                 "either way (docs/SPECULATIVE.md; default off)")
      ->type_name("off|ngram|draft")->check(CLI::IsMember({"off", "ngram", "draft"}));
  app.add_option("--draft-model", f.draft_model,
                 "draft: the draft model's folder or .bin (its tokenizer, if it has\n"
                 "one, must equal the target's)")->type_name("DIR");
  app.add_option("--draft-kv-cache-tokens", f.draft_kv_cache_tokens,
                 "draft: the draft model's KV cache in tokens (default 32768)")
      ->type_name("N")->check(in_range(1, kIntMax));
  app.add_option("--num-speculative-tokens", f.engine.num_speculative_tokens,
                 "most draft tokens a sequence verifies per step (default 4)")
      ->type_name("N")->check(in_range(1, kMaxSpeculativeTokens));
  app.add_option("--ngram-min", f.ngram_min,
                 "ngram: shortest suffix looked up (default 1)")
      ->type_name("N")->check(in_range(1, 64));
  app.add_option("--ngram-max", f.ngram_max,
                 "ngram: longest suffix looked up (default 4)")
      ->type_name("N")->check(in_range(1, 64));
  app.add_option_function<std::string>(
         "--speculative-policy",
         [&f](const std::string& v) { f.engine.adaptive_speculation = v == "adaptive"; },
         "adaptive: each draft as long as the measured step cost and the\n"
         "request's acceptance make worth it; always: every draft of\n"
         "--num-speculative-tokens (benchmarks; default adaptive)")
      ->type_name("adaptive|always")->check(CLI::IsMember({"adaptive", "always"}));
  app.add_flag_callback("--no-request-log", [&f] { f.http.log_requests = false; },
                        "do not log one line per finished request");
}

}  // namespace

int parse_server_flags(int argc, char** argv, ServerFlags& f) {
  if (const char* key = std::getenv("FLASHSERVE_API_KEY")) f.http.api_key = key;
  CLI::App app{kAbout, "flashserve"};
  app.footer(kFooter);
  app.get_formatter()->column_width(32);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last one wins
  add_flags(app, f);
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (f.enforce_eager) f.runner.graph_max_batch = 0;
  if (f.ngram_min > f.ngram_max) {
    return cli::usage_error(app, "--ngram-min " + std::to_string(f.ngram_min) +
                                     " exceeds --ngram-max " + std::to_string(f.ngram_max));
  }
  if ((f.speculative == "draft") != !f.draft_model.empty())
    return cli::usage_error(app, "--speculative draft and --draft-model go together");
  if (f.speculative == "ngram")
    f.engine.proposer = std::make_shared<NgramProposer>(f.ngram_min, f.ngram_max);
  if (f.model.empty()) {  // beside the program, not the working directory (weights/default_model.h)
    f.model = default_model_dir();
    if (f.model.empty()) {
      return cli::usage_error(app, "--model is required (no stories260K beside the program)");
    }
  }
  f.http.cors = CorsPolicy(f.allowed_origins);
  if (f.group.node_rank >= f.group.nnodes)
    return cli::usage_error(app, "--node-rank " + std::to_string(f.group.node_rank) +
                                     " needs --nnodes > " + std::to_string(f.group.node_rank));
  if (f.group.nnodes > 1) {
    // A secret, so from the environment (a Kubernetes Secret) like FLASHSERVE_API_KEY: a flag
    // would show it in `ps` and in the pod's spec. Not a switch: without it a group cannot form.
    const char* token = std::getenv("FLASHSERVE_GROUP_TOKEN");
    if (token == nullptr || *token == '\0')
      return cli::usage_error(app, "--nnodes > 1 needs the group's shared secret in "
                                   "FLASHSERVE_GROUP_TOKEN (the same on every node)");
    f.group.identity.token = token;
  }
  return -1;
}

}  // namespace flashserve
