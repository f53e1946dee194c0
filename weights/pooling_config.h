// sentence-transformers model folders: whether modules.json declares the model an embedder, and
// how its Pooling module (1_Pooling/config.json) pools. Only last-token pooling is served (the
// decoder embedders' mode, as in Qwen3-Embedding): mean, CLS and max pooling need hidden states
// of positions the prefix cache skips, so a folder asking for them fails at start-up.
#pragma once

#include <optional>
#include <string>

namespace flashserve {

struct PoolingConfig {
  int dimension = 0;       // the Pooling module's word_embedding_dimension (= hidden_size)
  bool normalize = false;  // a Normalize module follows the pooling
};

// The pooling `model_path` (a model folder; a file has none) declares: nullopt when it has no
// modules.json or that lists no Pooling module. Throws flashserve::Error "<file>: <problem>"
// for bad JSON, a module type other than Transformer, Pooling and Normalize (a Dense projection,
// say), a pooling mode other than last-token, or a dimension other than `hidden_size`.
std::optional<PoolingConfig> read_pooling_config(const std::string& model_path, int hidden_size);

}  // namespace flashserve
