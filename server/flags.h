// The `flashserve` binary's command line: every flag with its range and help text, parsed with
// CLI11 under cli/cli.h's conventions (--help exits 0, a usage error 2). A file of its own so that
// CLI11, the costliest header to compile, is compiled beside main.cpp rather than inside it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/engine.h"
#include "parallel/node_group.h"
#include "server/http_server.h"

namespace flashserve {

// The flags' values; the initial values are the defaults the help text states. The runner's, the
// engine's and the HTTP server's options are bound to their flags directly.
struct ServerFlags {
  std::string model, tokenizer, served_model_name, chat_template;
  std::string tool_call_parser = "auto";  // --tool-call-parser (server/api/tool_call_syntax.h)
  std::string reasoning_parser = "auto";  // --reasoning-parser (reasoning_parser_enabled)
  std::string task = "auto";  // --task: auto | generate | embed (server/endpoints/embeddings.h)
  std::string quantize = "none";  // --quantize: none | fp8 (docs/FP8.md)
  ModelRunnerOptions runner{.backend = "auto"};
  // max_num_seqs and max_num_batched_tokens 0: sized at start-up (server/serving_defaults.h).
  EngineOptions engine{.max_num_seqs = 0, .max_num_batched_tokens = 0};
  HttpServerOptions http;  // its cors comes from allowed_origins
  std::string allowed_origins;  // --allowed-origins (server/http/cors.h)
  bool enforce_eager = false;  // no CUDA graphs, whatever --cuda-graph-max-batch says
  // --speculative off | ngram | draft and its settings (docs/SPECULATIVE.md). ngram's proposer
  // is made here; draft's in main(), once the target is loaded. Either goes to engine.proposer.
  std::string speculative = "off";
  int ngram_min = 1, ngram_max = 4;
  std::string draft_model;               // --draft-model DIR
  int64_t draft_kv_cache_tokens = 32768;  // the draft model's own KV cache
  // Several hosts (--nnodes > 1; parallel/node_group.h): the token comes from
  // FLASHSERVE_GROUP_TOKEN, nccl from the backend at start-up.
  NodeGroupOptions group;
  // SIGINT/SIGTERM: seconds the requests in flight may take to finish (new ones get 503) before
  // the rest are aborted; 0 aborts them at once.
  double drain_timeout_s = 0;
};

// Parses the command line into `f` (FLASHSERVE_API_KEY is the --api-key default; an empty
// --model becomes the default model beside the program). Returns -1 when the server should
// start, else main's exit status (0 after --help, 2 after a usage error).
int parse_server_flags(int argc, char** argv, ServerFlags& f);

}  // namespace flashserve
