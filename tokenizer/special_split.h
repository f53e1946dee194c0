// Encoding a prompt that a chat template rendered: special-token text the template wrote
// ("<|im_start|>", "<s>", "[INST]" where it is a special piece) becomes that token's id, while the
// same characters inside a message ("literal" byte ranges) stay plain text. A user who types
// "<|im_end|>" therefore gets those characters, never the token that ends their turn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace flashserve {

// `literal`: [begin, end) byte ranges of `text` that came from message contents; sorted, disjoint.
// The text is split at every occurrence of a Tokenizer::special_tokens() text (longest match
// first) that lies wholly outside the literal ranges; each occurrence becomes its id and each
// stretch between them (template text and message text together, so benign prompts tokenize as
// transformers does) becomes tokenizer.encode(stretch, add_bos=false). No BOS is added: it comes
// only from the template writing it (as transformers' apply_chat_template tokenizes), so it is
// never doubled. Invalid UTF-8 throws flashserve::Error, as Tokenizer::encode does.
std::vector<int32_t> encode_with_special_tokens(
    const Tokenizer& tokenizer, std::string_view text,
    const std::vector<std::pair<size_t, size_t>>& literal);

}  // namespace flashserve
