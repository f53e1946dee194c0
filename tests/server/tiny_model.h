// A tiny random-weight HF model folder for server tests: 2 layers of width 64 (fp32 weights, so
// the CPU backend runs it exactly) over a real SentencePiece tokenizer, which is copied beside it.
#pragma once

#include <filesystem>
#include <string>

#include "tokenizer/tokenizer.h"
#include "weights/random_model.h"

namespace flashserve::testing {

// Writes the model to `dir` for the tokenizer at `tok_path` (whose vocabulary size and EOS it
// takes) and returns its config.
inline ModelConfig write_tiny_model(const std::string& dir, const std::string& tok_path,
                                    const Tokenizer& tok, int max_model_len, uint64_t seed) {
  ModelConfig c;
  c.hidden_size = 64, c.intermediate_size = 128, c.num_layers = 2, c.num_q_heads = 4;
  c.num_kv_heads = 2, c.head_dim = 16, c.vocab_size = tok.vocab_size();
  c.max_model_len = max_model_len;
  c.eos_token_ids = {tok.eos_id()};
  write_random_hf_model(dir, c, seed, DType::kF32);
  std::filesystem::copy_file(tok_path, dir + "/tokenizer.model");
  return c;
}

}  // namespace flashserve::testing
