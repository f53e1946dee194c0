// Tokenizer over SentencePiece (the only file that includes its headers). Encode rejects invalid
// UTF-8 up front, because SentencePiece would otherwise silently map bad bytes to U+FFFD or <unk>.
// Ids past the vocabulary (a model's padding rows) decode to nothing and have the piece "";
// negative ids throw.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include "core/error.h"
#include "tokenizer/tokenizer_backends.h"
#include "tokenizer/utf8.h"

namespace flashserve {

namespace {

// Ids of the USER_DEFINED pieces, read from the serialized ModelProto: SentencePiece 0.1.97
// (Debian's) has no IsUserDefined(). Wire format: ModelProto field 1 = repeated SentencePiece
// {1: piece, 2: score, 3: type (USER_DEFINED = 4)}. Anything unexpected ends the walk.
std::vector<bool> user_defined_flags(const std::string& proto, int piece_count) {
  std::vector<bool> flags(size_t(std::max(piece_count, 0)), false);
  auto varint = [](const std::string& s, size_t* i, uint64_t* v) {
    *v = 0;
    for (int shift = 0; *i < s.size() && shift < 64; shift += 7) {
      const auto b = static_cast<unsigned char>(s[(*i)++]);
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  // Skips a field of wire type `wt` at *i; false when malformed.
  auto skip = [&](const std::string& s, size_t* i, uint64_t wt) {
    uint64_t v = 0;
    if (wt == 0) return varint(s, i, &v);
    if (wt == 1) return (*i += 8) <= s.size();
    if (wt == 5) return (*i += 4) <= s.size();
    if (wt != 2 || !varint(s, i, &v) || v > s.size() - *i) return false;
    *i += v;
    return true;
  };
  size_t i = 0, id = 0;
  uint64_t key = 0, len = 0;
  while (i < proto.size() && varint(proto, &i, &key)) {
    if (key != ((1 << 3) | 2)) {  // not a piece
      if (!skip(proto, &i, key & 7)) break;
      continue;
    }
    if (!varint(proto, &i, &len) || len > proto.size() - i) break;
    const std::string piece = proto.substr(i, len);
    i += len;
    for (size_t j = 0; j < piece.size() && varint(piece, &j, &key);) {
      uint64_t type = 0;
      if (key == ((3 << 3) | 0) && varint(piece, &j, &type)) {
        if (type == 4 && id < flags.size()) flags[id] = true;
      } else if (!skip(piece, &j, key & 7)) {
        break;
      }
    }
    ++id;
  }
  return flags;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      FS_THROW(path, ": tokenizer model file does not exist");
    const auto status = sp_.Load(path);
    if (!status.ok()) FS_THROW(path, ": not a SentencePiece model: ", status.ToString());
    if (sp_.GetPieceSize() <= 0) FS_THROW(path, ": SentencePiece model has no pieces");
    for (int id = 0; id < sp_.GetPieceSize(); ++id)
      max_piece_bytes_ = std::max(max_piece_bytes_, sp_.IdToPiece(id).size());
    user_defined_ = user_defined_flags(sp_.serialized_model_proto(), sp_.GetPieceSize());
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    const size_t bad = utf8_valid_prefix(text);
    if (bad != text.size())
      FS_THROW("invalid UTF-8 in text to encode at byte ", bad, " of ", text.size());
    std::vector<int> ids;
    const auto status = sp_.Encode(absl::string_view(text.data(), text.size()), &ids);
    if (!status.ok()) FS_THROW("SentencePiece encode failed: ", status.ToString());
    std::vector<int32_t> out;
    out.reserve(ids.size() + 1);
    if (add_bos && sp_.bos_id() >= 0) out.push_back(sp_.bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<int> known;  // SentencePiece rejects ids it does not have: leave them out
    known.reserve(ids.size());
    for (int32_t id : ids)
      if (check_id(id)) known.push_back(id);
    std::string text;
    const auto status = sp_.Decode(known, &text);
    if (!status.ok()) FS_THROW("SentencePiece decode failed: ", status.ToString());
    return text;
  }

  std::string piece(int32_t id) const override {
    return check_id(id) ? sp_.IdToPiece(id) : "";
  }

  std::vector<SpecialToken> special_tokens() const override {
    std::vector<SpecialToken> out;
    for (int id = 0; id < sp_.GetPieceSize(); ++id)
      if (sp_.IsControl(id) || sp_.IsUnknown(id) || user_defined_[size_t(id)])
        out.push_back({sp_.IdToPiece(id), id});
    std::stable_sort(out.begin(), out.end(), [](const SpecialToken& a, const SpecialToken& b) {
      return a.text.size() > b.text.size();
    });
    return out;
  }

  size_t max_piece_bytes() const override { return max_piece_bytes_; }
  int vocab_size() const override { return sp_.GetPieceSize(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }

 private:
  // True for an id of the vocabulary, false for one past it; a negative id throws.
  bool check_id(int32_t id) const {
    if (id < 0) FS_THROW("token id ", id, " is negative");
    return id < sp_.GetPieceSize();
  }
  sentencepiece::SentencePieceProcessor sp_;
  size_t max_piece_bytes_ = 1;
  std::vector<bool> user_defined_;  // by id
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace flashserve
