// Token pieces -> the bytes they decode to in the middle of a text (see token_vocabulary.h).
#include "structured/token_vocabulary.h"

#include <algorithm>
#include <set>

#include "tokenizer/hf_text.h"
#include "tokenizer/tokenizer.h"

namespace flashserve::structured {

namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 '▁'

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// "<0xNN>" -> the byte, or -1.
int byte_fallback(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int hi = hex_value(piece[3]), lo = hex_value(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string metaspace_to_space(const std::string& piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, kMetaspace.size(), kMetaspace) == 0) {
      out += ' ';
      i += kMetaspace.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

// Byte-level BPE piece -> bytes; false when some character is not in GPT-2's table.
bool byte_level_to_bytes(const std::string& piece, std::string& out) {
  const hf::ByteLevelTable& table = hf::byte_level_table();
  out.clear();
  for (size_t i = 0; i < piece.size();) {
    const size_t n = utf8_sequence_length(piece, i);
    if (n == 0) return false;
    const uint32_t cp = hf::decode_utf8(piece, i, n);
    if (cp >= table.char_to_byte.size() || table.char_to_byte[cp] < 0) return false;
    out += static_cast<char>(table.char_to_byte[cp]);
    i += n;
  }
  return true;
}

}  // namespace

TokenVocabulary vocabulary_from_tokenizer(const Tokenizer& tokenizer, int model_vocab_size,
                                          std::vector<int32_t> extra_stop_ids,
                                          const std::vector<int32_t>& spelled_ids) {
  const int n = tokenizer.vocab_size();
  std::set<int32_t> special{tokenizer.bos_id(), tokenizer.eos_id()};
  for (const SpecialToken& t : tokenizer.special_tokens()) special.insert(t.id);
  // Byte-level BPE is recognised by its space piece 'Ġ' decoding to " ".
  const std::string space_char = hf::byte_level_table().byte_to_char[' '];
  bool byte_level = false;
  for (int id = 0; id < n && !byte_level; ++id)
    byte_level = tokenizer.piece(id) == space_char && tokenizer.decode({id}) == " ";

  TokenVocabulary vocab;
  vocab.token_bytes.resize(std::max(n, model_vocab_size));
  for (int32_t id : spelled_ids) {
    if (id >= 0 && id < n && special.erase(id)) vocab.token_bytes[id] = tokenizer.piece(id);
  }
  for (int id = 0; id < n; ++id) {
    if (special.count(id) || !vocab.token_bytes[id].empty()) continue;
    const std::string piece = tokenizer.piece(id);
    std::string& out = vocab.token_bytes[id];
    if (int b = byte_fallback(piece); b >= 0) {
      out = std::string(1, static_cast<char>(b));
    } else if (byte_level) {
      if (!byte_level_to_bytes(piece, out)) out = tokenizer.decode({id});  // an added token: raw text
    } else {
      out = metaspace_to_space(piece);
    }
  }
  vocab.stop_ids.push_back(tokenizer.eos_id());
  for (int32_t id : extra_stop_ids)
    if (std::find(vocab.stop_ids.begin(), vocab.stop_ids.end(), id) == vocab.stop_ids.end()) vocab.stop_ids.push_back(id);
  for (int32_t id : vocab.stop_ids)
    if (id >= 0 && id < vocab.vocab_size()) vocab.token_bytes[id].clear();
  return vocab;
}

}  // namespace flashserve::structured
