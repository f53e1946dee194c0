// The `flashserve` binary: parses flags, loads the model and tokenizer, starts the Engine and the
// HTTP server, and shuts down cleanly on SIGINT/SIGTERM (exit 0) or on an engine fault (exit 1).
// Exit codes: 0 clean shutdown (and --help), 1 start-up failure or engine fault, 2 usage error.
// With --nnodes > 1 the nodes first form a group (parallel/node_group.h); node 0 goes on as
// above, the others run node 0's steps until it stops the group (exit 0) or the group fails
// (exit 1); a lost node is an engine fault on node 0.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>

#include "chat_template/chat_template.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/forward_runner.h"
#include "model/tensor_parallel_runner.h"
#include "parallel/communicator.h"
#include "parallel/node_group.h"
#include "scheduling/kv_window.h"
#include "server/endpoints/chat_request.h"
#include "server/flags.h"
#include "server/http_server.h"
#include "server/serving_defaults.h"
#include "speculative/draft_model_proposer.h"
#include "structured/compiled_grammar.h"
#include "structured/token_vocabulary.h"
#include "tokenizer/tokenizer.h"
#include "weights/loaded_model.h"
#include "weights/pooling_config.h"

namespace fs = std::filesystem;
using namespace flashserve;

namespace {

// A signal delivered to a thread that does not block it (see main). Lock-free, so async-safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

// --chat-template, else the model folder's own template (nullptr: none). bos/eos text for the
// template falls back to the tokenizer's pieces (llama2.c checkpoints have no tokenizer_config).
std::shared_ptr<const ChatTemplate> load_chat_template(const ServerFlags& flags,
                                                       const Tokenizer& tok) {
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

// --speculative draft: the draft model on its own runner (one device, its own KV cache of
// --draft-kv-cache-tokens). Refused when its vocabulary, BOS/EOS or tokenizer differ from the
// target's; the error names the first difference.
std::shared_ptr<Proposer> make_draft_proposer(const ServerFlags& flags, const LoadedModel& target,
                                              const Tokenizer& target_tokenizer) {
  std::unique_ptr<LoadedModel> draft = load_model(flags.draft_model);
  draft->use_tokenizer_eos(target_tokenizer.eos_id());
  std::string tok_path;
  try {
    tok_path = find_tokenizer_file(flags.draft_model);
  } catch (const std::exception&) {  // no tokenizer of its own: its vocabulary size is checked
  }
  if (!tok_path.empty()) {
    const auto tok = Tokenizer::load(tok_path);
    FS_CHECK(tok->vocab_size() == target_tokenizer.vocab_size(), "--draft-model: its tokenizer has ",
             tok->vocab_size(), " tokens, the target's ", target_tokenizer.vocab_size());
    for (int id = 0; id < tok->vocab_size(); ++id)
      FS_CHECK(tok->piece(id) == target_tokenizer.piece(id), "--draft-model: token ", id, " is '",
               tok->piece(id), "' in its tokenizer, '", target_tokenizer.piece(id),
               "' in the target's");
  }
  ModelRunnerOptions ro = flags.runner;
  ro.kv_cache_tokens = flags.draft_kv_cache_tokens;
  ro.tensor_parallel_size = 1;
  try {
    return std::make_shared<DraftModelProposer>(ModelRunner::create(*draft, ro), target.config());
  } catch (const std::exception& e) {
    FS_THROW("--draft-model ", flags.draft_model, ": ", e.what());
  }
}

// What must match on every node of a group, as "key=value;..." (the rendezvous names the first
// key that differs): the model's shape and the options that shape each rank's work.
std::string group_model_description(const std::string& name, const ModelConfig& c,
                                    const ServerFlags& f) {
  return str_cat("model=", name, ";layers=", c.num_layers, ";hidden=", c.hidden_size,
                 ";intermediate=", c.intermediate_size, ";heads=", c.num_q_heads, "/",
                 c.num_kv_heads, ";head_dim=", c.head_dim, ";vocab=", c.vocab_size,
                 ";context=", c.max_model_len, ";quantize=", f.quantize,
                 ";tensor-parallel-size=", f.runner.tensor_parallel_size,
                 ";backend=", uses_cuda(f.runner) ? "cuda" : "cpu",
                 ";block-size=", f.runner.block_size, ";kv-cache-tokens=", f.runner.kv_cache_tokens,
                 ";cuda-graph-max-batch=", f.runner.graph_max_batch);
}

// Waits until the engine holds no request or `seconds` passed (a lost node or an engine fault
// ends the wait too: nothing would finish then).
void drain(const Engine& engine, double seconds) {
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::milliseconds(int64_t(seconds * 1000));
  int left = 0;
  while (std::chrono::steady_clock::now() < end && !engine.failed()) {
    const EngineMetrics m = engine.metrics();
    left = m.num_running + m.num_waiting;
    if (left == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (left == 0)
    std::fprintf(stderr, "flashserve: in-flight requests finished in %.1f s\n", took);
  else
    std::fprintf(stderr, "flashserve: --drain-timeout %g s passed; aborting %d requests\n", seconds, left);
}

}  // namespace

int main(int argc, char** argv) {
  ServerFlags flags;
  if (const int rc = parse_server_flags(argc, argv, flags); rc >= 0) return rc;
  // Before any CUDA call.
  flashserve::prepare_cuda_for_tensor_parallelism(flags.runner.tensor_parallel_size);

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

  std::unique_ptr<NodeGroup> group;  // --nnodes > 1; outlives the engine (its end stops the group)
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::shared_ptr<const ChatTemplate> chat_template;
  bool embed = false;  // --task embed, or auto with a sentence-transformers Pooling module
  std::string serving_rule;  // how max_num_seqs and max_num_batched_tokens were chosen
  try {
    // --quantize fp8 on the GPU where one CUDA backend runs the model (LoadOptions).
    const bool one_gpu = uses_cuda(flags.runner) && flags.runner.tensor_parallel_size == 1 &&
                         flags.group.nnodes == 1;
    std::unique_ptr<LoadedModel> model =
        load_model(flags.model, LoadOptions{.quantize = parse_quantize(flags.quantize),
                                            .task = parse_model_task(flags.task),
                                            .fp8_in_backend = one_gpu});
    // tokenizer.json, else tokenizer.model, beside the weights (the error lists what was tried).
    const std::string tok_path =
        flags.tokenizer.empty() ? find_tokenizer_file(flags.model) : flags.tokenizer;
    if (flags.task != "generate") {
      embed = read_pooling_config(flags.model, model->config().hidden_size).has_value();
      embed = embed || flags.task == "embed";
    }
    tokenizer = Tokenizer::load(tok_path);
    model->use_tokenizer_eos(tokenizer->eos_id());
    chat_template = load_chat_template(flags, *tokenizer);
    // The draft model first, so that the target's KV cache is sized by what is left.
    if (flags.speculative == "draft") flags.engine.proposer = make_draft_proposer(flags, *model, *tokenizer);
    if (flags.group.nnodes > 1) {
      flags.group.nccl = uses_cuda(flags.runner);
      flags.group.identity.model =
          group_model_description(default_model_name(flags.model), model->config(), flags);
      group = NodeGroup::join(flags.group);
      group->start();
      flags.runner.node_group = group.get();
      if (flags.group.node_rank > 0) {
        std::fprintf(stderr, "flashserve: node %d of %d: running node 0's steps\n",
                     flags.group.node_rank, flags.group.nnodes);
        run_tensor_parallel_worker(*model, flags.runner);
        std::fprintf(stderr, "flashserve: node 0 stopped the group\n");
        return 0;
      }
    }
    auto runner = ModelRunner::create(*model, flags.runner);
    // The runner holds its own copy of the weights (CPU: fp32 buffers; CUDA: device memory) and
    // of the config, so the memory-mapped files can go now instead of staying mapped for good.
    model.reset();
    // The batch limits left to us, from what the weights left of the device (serving_defaults.h).
    const int64_t kv_tokens = int64_t(runner->num_kv_blocks()) * runner->block_size();
    const ServingDefaults sized =
        size_serving_defaults(uses_cuda(flags.runner), kv_tokens,
                              flags.engine.max_num_seqs, flags.engine.max_num_batched_tokens);
    flags.engine.max_num_seqs = sized.max_num_seqs;
    flags.engine.max_num_batched_tokens = sized.max_num_batched_tokens;
    serving_rule = sized.rule;
    if (flags.http.threads == 0)
      flags.http.threads = std::min(flags.engine.max_num_seqs + flags.engine.max_queue + 8, 2048);
    engine = Engine::create(std::move(runner), flags.engine);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashserve: %s: %s\n",
                 group && flags.group.node_rank > 0 ? "node failed" : "start-up failed", e.what());
    return 1;
  }

  const ModelConfig& c = engine->config();
  const ModelRunner& r = engine->runner();
  ServedModel served;
  served.id = flags.served_model_name.empty() ? default_model_name(flags.model)
                                              : flags.served_model_name;
  served.max_model_len = c.max_model_len;
  served.vocab_size = c.vocab_size;
  served.created = static_cast<int64_t>(std::time(nullptr));
  // A model whose every layer is windowed holds at most a window of KV per sequence, so a
  // request may be longer than the cache: the engine checks it then (scheduling/kv_window.h).
  served.kv_cache_tokens = shared_kv_window(c.layer_windows) > 0
                               ? 0
                               : int64_t(r.num_kv_blocks()) * r.block_size();
  served.sampling_defaults = sampling_defaults(c.generation);
  served.chat_template = chat_template;
  served.eos_ids = c.eos_token_ids;
  // gpt-oss writes harmony whatever template it is served with.
  const bool gpt_oss = c.architecture == "GptOssForCausalLM";
  served.tool_calls = tool_call_syntax(gpt_oss && flags.tool_call_parser == "auto"
                                           ? "harmony" : flags.tool_call_parser,
                                       chat_template ? chat_template->source() : "",
                                       chat_template && chat_template->uses_tools(), *tokenizer);
  // Structured outputs: one grammar compiler over this vocabulary (with the markers a forced
  // harmony call writes), shared by every handler.
  served.grammar_compiler = std::make_shared<structured::GrammarCompiler>(
      std::make_shared<const structured::VocabTrie>(structured::vocabulary_from_tokenizer(
          *tokenizer, c.vocab_size, c.eos_token_ids, served.tool_calls.grammar_spelled_ids)));
  served.reasoning = reasoning_parser_enabled(flags.reasoning_parser, chat_template.get());
  served.embedding_dimensions = embed ? c.hidden_size : 0;
  served.speculative = flags.engine.proposer != nullptr;
  if (embed)
    std::fprintf(stderr, "flashserve: embedding model: /v1/embeddings only (last-token pooling, "
                         "L2-normalised, %d dimensions)\n", c.hidden_size);
  // FP8 (from the checkpoint or --quantize fp8) runs as FP8. Int4 and block-wise FP8 load
  // packed: the CUDA backend keeps them packed on the GPU (block-wise FP8 as codes and block
  // scales: the warp kernel or the skinny kernel up to 16 rows, cuBLASLt's block-scaled GEMM
  // above, the weight dequantized to bf16 where neither takes it), the CPU backend dequantizes
  // them to f32; the backend line says which kernels run (docs/QUANTIZATION.md).
  const bool packed = c.quant.is_int4() || c.quant.format == QuantFormat::kBlockFp8;
  std::string quantization = c.quant_method == "fp8" ? ", FP8 weights (docs/FP8.md)" : "";
  if (packed) quantization = ", " + describe_quantization(c.quant) + " (docs/QUANTIZATION.md)";
  std::fprintf(stderr,
               "flashserve: model %s (%s): %d layers, hidden %d, intermediate %d, heads %d/%d "
               "(q/kv), head_dim %d, vocab %d, context %d%s\n"
               "flashserve: backend %s; KV cache %d blocks x %d tokens = %lld tokens; "
               "max_num_seqs %d, max_num_batched_tokens %d (%s), max_queue %d, prefix caching %s\n",
               served.id.c_str(), flags.model.c_str(), c.num_layers, c.hidden_size,
               c.intermediate_size, c.num_q_heads, c.num_kv_heads, c.head_dim, c.vocab_size,
               c.max_model_len,
               quantization.c_str(),
               r.backend_name().c_str(), r.num_kv_blocks(),
               r.block_size(), static_cast<long long>(r.num_kv_blocks()) * r.block_size(),
               flags.engine.max_num_seqs, flags.engine.max_num_batched_tokens,
               serving_rule.c_str(), flags.engine.max_queue, flags.engine.enable_prefix_caching ? "on" : "off");
  if (flags.engine.proposer) {
    std::fprintf(stderr, "flashserve: speculative decoding %s, up to %d draft tokens, policy %s\n",
                 flags.engine.proposer->name().c_str(), flags.engine.num_speculative_tokens,
                 flags.engine.adaptive_speculation ? "adaptive" : "always");
  }
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

  HttpServerOptions& ho = flags.http;
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
  // The per-address cap is here because a load balancer in front is one address: it must keep
  // its pool under the cap, or start the server with --max-connections-per-client 0.
  const std::string per_client = ho.limits.max_connections_per_client > 0
      ? std::to_string(ho.limits.max_connections_per_client) : std::string("no cap on");
  std::printf("flashserve: listening on http://%s:%d (%s connections per client address%s)\n",
              ho.host.c_str(), server.port(), per_client.c_str(),
              ho.api_key.empty() ? "" : "; API key required");
  std::fflush(stdout);

  std::atomic<bool> done{false};
  int exit_code = 0;
  std::thread watcher([&] {
    const timespec tick{0, 100 * 1000 * 1000};
    while (!done.load()) {
      int sig = sigtimedwait(&signals, nullptr, &tick);
      if (sig <= 0) sig = g_signal.exchange(0);
      // A lost node fails the step in flight (an engine fault); between steps it is seen here.
      const bool failed = engine->failed() || (group && group->failed());
      if (sig <= 0 && !failed) continue;
      if (failed) {
        std::fprintf(stderr, "flashserve: the engine failed%s%s; shutting down\n",
                     group && group->failed() ? ": " : "",
                     group && group->failed() ? group->failure().c_str() : "");
        exit_code = 1;
      } else {
        std::fprintf(stderr, "flashserve: signal %d; finishing in-flight requests and exiting\n", sig);
      }
      server.set_draining();  // new requests and /health: 503
      if (!failed && flags.drain_timeout_s > 0) drain(*engine, flags.drain_timeout_s);
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
