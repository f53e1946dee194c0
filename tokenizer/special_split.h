// Encoding a prompt that a chat template rendered: special-token text the template wrote
// ("<|im_start|>", "<s>", "[INST]" where it is a special piece) becomes that token's id, while the
// same characters inside a message ("literal" byte ranges) stay plain text. A user who types
// "<|im_end|>" therefore gets those characters, never the token that ends their turn.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace flashserve {

// `literal`: [begin, end) byte ranges of `text` that came from message contents; sorted, disjoint.
// An occurrence of a Tokenizer::special_tokens() text that lies wholly outside the literal
// ranges becomes its id; every other character is encoded as text, and no BOS is added (it comes
// only from the template writing it, as transformers' apply_chat_template tokenizes, so it is
// never doubled). Invalid UTF-8 throws flashserve::Error, as Tokenizer::encode does.
//   tokenizer.json: exactly HF's encode(text, add_special_tokens=False) over the whole text
//   (what transformers' apply_chat_template(tokenize=True) gives) wherever no message spells a
//   special token: added tokens' lstrip / rstrip eat the whitespace around them (Phi-3's
//   "<|user|>\nHello" is [<|user|>, ▁Hello]), single_word holds, and only the text's real start
//   counts as its start (Metaspace prepend_scheme "first"). A special token matched only after
//   normalization (normalized: true, which no published chat token uses) becomes its id only
//   where the stretch between raw-matched tokens around it holds no message text.
//   SentencePiece and others: the text is cut at those occurrences (longest match first) and
//   each stretch between them is encode(stretch, add_bos=false).
std::vector<int32_t> encode_with_special_tokens(const Tokenizer& tokenizer, std::string_view text,
                                                const ByteRanges& literal);

// Whether [begin, end) shares a byte with one of `ranges` (sorted, disjoint).
bool touches_ranges(const ByteRanges& ranges, size_t begin, size_t end);
// Whether [begin, end) lies within a single one of `ranges`.
bool within_one_range(const ByteRanges& ranges, size_t begin, size_t end);

}  // namespace flashserve
