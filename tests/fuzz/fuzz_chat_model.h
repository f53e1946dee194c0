// The model the request fuzzers parse against: stories260K's real tokenizer and the built-in
// ChatML template (made once per process, as libFuzzer calls the target millions of times).
#pragma once

#include <memory>
#include <string>

#include "chat_template/chat_template.h"
#include "server/api/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::fuzz {

inline const Tokenizer& stories_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok =
      Tokenizer::load(std::string(FS_MODELS_DIR) + "/stories260K/tok512.model");
  return *tok;
}

inline const ServedModel& chatml_model() {
  static const ServedModel model = [] {
    ServedModel m{"stories260K", 512, stories_tokenizer().vocab_size(), 0};
    m.chat_template =
        std::make_shared<ChatTemplate>(ChatTemplate::from_flag("chatml", "<s>", "</s>"));
    return m;
  }();
  return model;
}

}  // namespace flashserve::fuzz
