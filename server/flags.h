// The `flashserve` binary's command line: every flag with its range and help text, parsed with
// CLI11 under cli/cli.h's conventions (--help exits 0, a usage error 2). A file of its own so that
// CLI11, the costliest header to compile, is compiled beside main.cpp rather than inside it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "server/connection_front.h"

namespace flashserve {

// The flags' values; the initial values are the defaults the help text states.
struct ServerFlags {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model, tokenizer, served_model_name, api_key, backend = "auto", chat_template;
  std::string tool_call_parser = "auto";  // --tool-call-parser (server/tool_call_syntax.h)
  std::string reasoning_parser = "auto";  // --reasoning-parser (reasoning_parser_enabled)
  std::string task = "auto";  // --task: auto | generate | embed (server/embeddings_api.h)
  std::string quantize = "none";  // --quantize: none | fp8 (docs/FP8.md)
  int max_num_seqs = EngineOptions{}.max_num_seqs;
  int max_num_batched_tokens = EngineOptions{}.max_num_batched_tokens;
  int max_queue = EngineOptions{}.max_queue;
  int64_t kv_cache_tokens = 0;
  double kv_memory_fraction = ModelRunnerOptions{}.kv_memory_fraction;
  int64_t max_body_bytes = 4 << 20;
  int threads = 0, block_size = 16, http_threads = 0, tensor_parallel_size = 1;
  int cuda_graph_max_batch = ModelRunnerOptions{}.graph_max_batch;
  bool log_requests = true;
  bool metrics_public = false;  // --metrics-public: /metrics without the API key
  bool force_include_usage = false;  // --enable-force-include-usage
  std::string allowed_origins;  // --allowed-origins (server/cors.h)
  bool prefix_caching = true;
  bool enforce_eager = false;  // no CUDA graphs, whatever --cuda-graph-max-batch says
  ConnectionLimits limits;
};

// Parses the command line into `f` (FLASHSERVE_API_KEY is the --api-key default; an empty
// --model becomes the default model beside the program). Returns -1 when the server should
// start, else main's exit status (0 after --help, 2 after a usage error).
int parse_server_flags(int argc, char** argv, ServerFlags& f);

}  // namespace flashserve
