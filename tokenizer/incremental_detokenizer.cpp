// IncrementalDetokenizer: decodes a short window of ids per push instead of the whole sequence.
// The window starts at an "anchor": the latest piece that is neither control nor byte and decodes
// to non-empty text on its own. SentencePiece's decode differs between a window and the whole
// sequence only in the first piece (its leading "▁" is dropped) and in byte runs cut at the
// window start; an anchor absorbs both, so every piece after it decodes as in the full sequence.
// Text is held back while the window's decode ends in U+FFFD (an incomplete byte sequence that
// later byte pieces may still complete), and, for tokenizers whose byte runs decode as a whole,
// while the window ends in a byte piece. Byte-level vocabularies (GPT-2 style) spread one
// character over several tokens; a token holding part of a character decodes to U+FFFD alone,
// so it is never an anchor.
#include <algorithm>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace flashserve {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool ends_with_replacement(const std::string& s) {
  return s.size() >= kReplacement.size() &&
         std::string_view(s).substr(s.size() - kReplacement.size()) == kReplacement;
}

bool is_byte_piece(const std::string& piece) {
  return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>';
}

// An anchor decodes on its own to text that starts a character: not a byte piece, not empty
// (control pieces decode to ""), and no U+FFFD (a byte-level token holding part of a
// character, which decodes differently next to its neighbours).
bool is_anchor(const Tokenizer& tokenizer, int32_t id) {
  if (is_byte_piece(tokenizer.piece(id))) return false;
  const std::string text = tokenizer.decode({id});
  return !text.empty() && text.find(kReplacement) == std::string::npos;
}

std::string decode_range(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, size_t end) {
  return tokenizer.decode(std::vector<int32_t>(ids.begin(), ids.begin() + ptrdiff_t(end)));
}

// The part of `text` after `prefix`. Normally text extends prefix; only a context that ends
// inside a UTF-8 sequence breaks that (its U+FFFDs turn into a character): then the delta starts
// at the last character the two share.
std::string text_after(const std::string& prefix, const std::string& text) {
  if (text.compare(0, prefix.size(), prefix) == 0) return text.substr(prefix.size());
  size_t common = size_t(
      std::mismatch(prefix.begin(), prefix.end(), text.begin(), text.end()).first - prefix.begin());
  while (common > 0 && (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80) --common;
  return text.substr(common);
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               std::vector<int32_t> context)
    : tokenizer_(tokenizer), window_(std::move(context)) {
  // Keep the context from its last anchor on (all of it when it has none: then the window starts
  // at the true start of the sequence, where the leading-space rule applies anyway).
  for (size_t i = window_.size(); i-- > 0;)
    if (is_anchor(tokenizer_, window_[i])) {
      window_.erase(window_.begin(), window_.begin() + ptrdiff_t(i));
      break;
    }
  read_offset_ = window_.size();
  prefix_text_ = decode_range(tokenizer_, window_, read_offset_);
}

std::string IncrementalDetokenizer::push(int32_t id) {
  // Checked before the id joins the window, so one bad id does not poison later pushes. Ids past
  // the tokenizer's vocabulary (a model's padding rows) join it and decode to nothing.
  if (id < 0) FS_THROW("token id ", id, " is negative");
  window_.push_back(id);
  // A byte run that may yet turn invalid as a whole (see Tokenizer::byte_runs_decode_as_whole)
  // is held until a piece of another kind ends it (pieces that decode to nothing, such as
  // control ids, do not end it).
  if (tokenizer_.byte_runs_decode_as_whole())
    for (size_t i = window_.size(); i-- > read_offset_;) {
      if (is_byte_piece(tokenizer_.piece(window_[i]))) return "";
      if (!tokenizer_.decode({window_[i]}).empty()) break;
    }
  std::string text = tokenizer_.decode(window_);
  if (ends_with_replacement(text)) return "";  // maybe an incomplete sequence: wait
  std::string delta = text_after(prefix_text_, text);
  // Advance: the newest anchor among the ids just completed becomes the window start.
  for (size_t i = window_.size(); i-- > read_offset_;)
    if (is_anchor(tokenizer_, window_[i])) {
      window_.erase(window_.begin(), window_.begin() + ptrdiff_t(i));
      text = tokenizer_.decode(window_);
      break;
    }
  read_offset_ = window_.size();
  prefix_text_ = std::move(text);
  return delta;
}

std::string IncrementalDetokenizer::flush() {
  std::string text = tokenizer_.decode(window_);
  std::string delta = text_after(prefix_text_, text);
  read_offset_ = window_.size();
  prefix_text_ = std::move(text);
  return delta;
}

}  // namespace flashserve
