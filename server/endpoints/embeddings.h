// POST /v1/embeddings for decoder models served as embedders (--task embed, docs/SERVER.md): the
// body parsed and validated (a pure function, unit-tested like openai_api), each input run
// through the Engine as a prefill-only request (GenerationRequest::embed), and the pooled
// vectors (last token's final-norm hidden state, L2-normalised, optionally cut to `dimensions`)
// written as OpenAI's list of embeddings, floats or base64. Also the one check that keeps each
// kind of model on its own endpoints.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/generation/completion.h"
#include "server/api/openai_api.h"

namespace flashserve {

class Tokenizer;

struct EmbeddingsRequest {
  std::vector<std::vector<int32_t>> inputs;  // token ids per input (text: encoded with BOS and
                                             // whatever the tokenizer's template adds)
  bool base64 = false;  // encoding_format "base64": little-endian float32 bytes
  int dimensions = 0;   // > 0: the first `dimensions` values, normalised again (Matryoshka)
};

// Inputs per request, as OpenAI's API allows.
constexpr size_t kMaxEmbeddingInputs = 2048;

// Parses a POST /v1/embeddings body: input (a string, a list of strings, a list of token ids or
// a list of such lists; none empty, each within max_model_len), encoding_format, dimensions (1
// .. model.embedding_dimensions), model and user. Anything else is a 400 naming the field.
std::variant<EmbeddingsRequest, ApiError> parse_embeddings_request(std::string_view body,
                                                                   const ServedModel& model,
                                                                   const Tokenizer& tokenizer);

// The vector a client gets from a pooled hidden state: its first `dimensions` values (0: all),
// divided by their L2 norm (left as they are when that norm is 0).
std::vector<float> normalized_embedding(std::span<const float> hidden,  // [hidden_size]
                                        int dimensions);

// A vector as encoding_format asks: a JSON list of numbers, or the base64 of its little-endian
// float32 bytes.
nlohmann::json embedding_value(std::span<const float> v, bool base64);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage":
// {"prompt_tokens", "total_tokens"}} for `vectors` (one per input, already normalised).
nlohmann::json embeddings_json(const std::vector<std::vector<float>>& vectors, bool base64,
                               const std::string& model, int prompt_tokens);

// Runs a parsed request: one engine request per input (all submitted at once, so the engine
// batches them), waiting for their vectors while watching `conn`; a client gone cancels them all
// (client_gone). More inputs than the queue holds: 400; queue full: 503; an engine failure: 500.
CompletionResult run_embeddings(const CompletionContext& ctx, const EmbeddingsRequest& request,
                                const std::string& cache_salt, ClientConnection& conn);

// The 400 that `endpoint` answers when the served model is of the other kind: the generation
// endpoints (/v1/completions, /v1/chat/completions, /v1/responses) on an embedding model, and
// /v1/embeddings on a generation model. nullopt when the model serves `endpoint`.
std::optional<ApiError> task_mismatch(const ServedModel& model, std::string_view endpoint);

}  // namespace flashserve
