// SentencePiece tokenizer and the incremental detokenizer used for streaming.
// This header does not include SentencePiece; tokenizer/sentencepiece_tokenizer.cpp is the only
// file that does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flashserve {

// A token that a chat template writes as text ("<|im_start|>", "<s>", "<|eot_id|>", ...) and that
// becomes its own id where the template writes it, never where a user's message holds the same
// characters (see tokenizer/special_split.h).
struct SpecialToken {
  std::string text;
  int32_t id = -1;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Loads a SentencePiece .model file; throws flashserve::Error naming the file on failure.
  static std::unique_ptr<Tokenizer> load(const std::string& model_path);

  // Encodes UTF-8 text; with add_bos the BOS id comes first. Invalid UTF-8 throws
  // flashserve::Error (callers at the API edge turn that into a 400).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // Decodes ids as SentencePiece does for a whole sequence (leading-space rule, byte fallback);
  // BOS/EOS/control ids decode to nothing.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual std::string piece(int32_t id) const = 0;  // the raw piece, e.g. "▁Once" or "<0xE2>"
  // Bytes of the longest piece as stored ("▁" counts 3, "<0xNN>" 6): no token stands for more
  // text than this, so the API edge can refuse a prompt that can never fit the context before
  // paying to encode it. The default suits SentencePiece's default 16-character pieces.
  virtual size_t max_piece_bytes() const { return 64; }
  // The special tokens a template may write (SentencePiece: control, unknown and user-defined
  // pieces; tokenizer.json: added tokens marked special), longest text first. encode() turns
  // user-defined pieces' text into their ids by itself, so special_split.cpp keeps message text
  // from ever being encoded with such a text whole.
  virtual std::vector<SpecialToken> special_tokens() const = 0;
  virtual int vocab_size() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
};

// Turns a stream of token ids into text deltas whose concatenation is exactly
// tokenizer.decode(all ids). Emits only complete UTF-8 code points and never takes back text it
// has emitted. `context` ids (e.g. the prompt) are decoded as context only and never emitted,
// so the first generated piece gets its leading space right.
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
