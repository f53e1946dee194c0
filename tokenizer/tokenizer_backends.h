// The two tokenizer back ends behind Tokenizer::load (internal to tokenizer/).
#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace flashserve {

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path);
// `json_path` is a tokenizer.json; a tokenizer_config.json beside it is read too.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path);

}  // namespace flashserve
