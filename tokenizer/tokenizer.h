// tokenizer/: turns text into token ids and ids back into text with a model's own tokenizer
// (SentencePiece .model or Hugging Face tokenizer.json), incrementally when streaming.
// This header includes neither library: tokenizer/sentencepiece_tokenizer.cpp and
// tokenizer/hf_*.cpp do (docs/TOKENIZER.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashserve {

// A token that a chat template writes as text ("<|im_start|>", "<s>", "<|eot_id|>", ...) and that
// becomes its own id where the template writes it, never where a user's message holds the same
// characters (see tokenizer/special_split.h).
struct SpecialToken {
  std::string text;
  int32_t id = -1;
};

// [begin, end) byte ranges of a text, sorted and disjoint.
using ByteRanges = std::vector<std::pair<size_t, size_t>>;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Loads a tokenizer.json (Hugging Face; a tokenizer_config.json beside it is read too), a
  // SentencePiece .model, or the one find_tokenizer_file picks in a folder; throws
  // flashserve::Error naming the file on failure (and the component a tokenizer.json uses that
  // is not supported).
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  // Encodes UTF-8 text; with add_bos the BOS id comes first (tokenizer.json: the special tokens
  // its post-processor adds, as transformers' tokenizer(text); without, none). Invalid UTF-8 throws
  // flashserve::Error (callers at the API edge turn that into a 400). Text that spells a special
  // token ("<|im_end|>", "</s>") stays text: only a chat template's own special tokens become
  // their ids (tokenizer/special_split.h), never characters a user typed. tokenizer.json's
  // non-special added tokens are matched in the text, as SentencePiece's user-defined pieces are.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // As encode, but text spelling a special token becomes its id, as transformers'
  // tokenizer(text) does by default (split_special_tokens=False). For tests and tools that
  // compare with transformers; the server uses encode(). SentencePiece: the same as encode.
  virtual std::vector<int32_t> encode_parsing_special_tokens(std::string_view text,
                                                             bool add_bos) const {
    return encode(text, add_bos);
  }
  // A prompt a chat template rendered, whose `literal` ranges came from message contents:
  // encode_with_special_tokens (tokenizer/special_split.h) calls this and says what comes out.
  // The default cuts the text at special-token texts outside the messages (special_split.cpp);
  // tokenizer.json runs its own pipeline over the whole text, so added tokens' lstrip / rstrip /
  // single_word and the pre-tokenizer's notion of the text's start are those of HF.
  virtual std::vector<int32_t> encode_chat_prompt(std::string_view text,
                                                  const ByteRanges& literal) const;
  // Decodes ids as the library does for a whole sequence (SentencePiece: leading-space rule,
  // byte fallback; tokenizer.json: its decoder, as decode(ids, skip_special_tokens=True));
  // BOS/EOS/control ids (tokenizer.json: added tokens marked special) decode to nothing.
  // Ids >= vocab_size() decode to nothing too (as transformers does): models often have more
  // embedding rows than their tokenizer has tokens (Qwen 2.5: 151936 for 151665), and may
  // sample one of those padding ids. Negative ids throw flashserve::Error.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // The raw piece, e.g. "▁Once" or "<0xE2>"; "" for an id >= vocab_size(); negative ids throw.
  virtual std::string piece(int32_t id) const = 0;
  // Bytes of the longest piece as stored ("▁" counts 3, "<0xNN>" 6): no token stands for more
  // text than this, so the API edge can refuse a prompt that can never fit the context before
  // paying to encode it. The default suits SentencePiece's default 16-character pieces.
  virtual size_t max_piece_bytes() const { return 64; }
  // The special tokens a template may write (SentencePiece: control, unknown and user-defined
  // pieces; tokenizer.json: added tokens marked special), longest text first. encode() turns
  // user-defined pieces' text into their ids by itself, so special_split.cpp keeps message text
  // from ever being encoded with such a text whole.
  virtual std::vector<SpecialToken> special_tokens() const = 0;
  // True when a run of byte pieces ("<0xNN>") decodes as a whole: if any byte of the run is
  // invalid, every byte becomes U+FFFD (HF's ByteFallback decoder), so a later byte piece can
  // change the text of earlier ones. SentencePiece decodes each character on its own.
  virtual bool byte_runs_decode_as_whole() const { return false; }
  // The tokenizer's own ids are [0, vocab_size()); the model's vocabulary may be larger.
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
};

// The tokenizer file for a model at `model_path` (a folder, or a weights file such as a llama2.c
// .bin): tokenizer.json, else tokenizer.model, else the single tok*.model (llama2.c), in the
// folder (the file's folder). Throws flashserve::Error listing what it looked for.
std::string find_tokenizer_file(const std::string& model_path);

// Turns a stream of token ids into text deltas whose concatenation is exactly
// tokenizer.decode(all ids). Emits only complete UTF-8 code points and never takes back text it
// has emitted. `context` ids (e.g. the prompt) are decoded as context only and never emitted,
// so the first generated piece gets its leading space right. Ids >= vocab_size() are accepted
// and add no text, as in decode(); a negative id throws and leaves the detokenizer unchanged.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer,
                                  std::vector<int32_t> context = {});
  std::string push(int32_t id);  // the newly completed text (possibly empty)
  // Whatever is held back at the end of the stream: bytes of an incomplete UTF-8 sequence come
  // out as one U+FFFD each, exactly as decode() renders them. Call once, at the end.
  std::string flush();

 private:
  // Only a short window of ids is decoded per push (see incremental_detokenizer.cpp).
  const Tokenizer& tokenizer_;
  std::vector<int32_t> window_;  // ids from the anchor piece on
  size_t read_offset_ = 0;       // window_[0, read_offset_) is context or already emitted
  std::string prefix_text_;      // decode(window_[0, read_offset_))
};

}  // namespace flashserve
