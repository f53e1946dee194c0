// Tokenizer over SentencePiece (the only file that includes its headers). Encode rejects invalid
// UTF-8 up front, because SentencePiece would otherwise silently map bad bytes to U+FFFD or <unk>.
// Decode and piece reject ids outside [0, vocab_size).
#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "tokenizer/loaders.h"
#include "tokenizer/utf8.h"

namespace flashserve {

namespace {

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
    for (int32_t id : ids) check_id(id);
    std::string text;
    const auto status = sp_.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
    if (!status.ok()) FS_THROW("SentencePiece decode failed: ", status.ToString());
    return text;
  }

  std::string piece(int32_t id) const override {
    check_id(id);
    return sp_.IdToPiece(id);
  }

  std::vector<SpecialToken> special_tokens() const override {
    std::vector<SpecialToken> out;
    for (int id = 0; id < sp_.GetPieceSize(); ++id)
      if (sp_.IsControl(id) || sp_.IsUnknown(id))
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
  void check_id(int32_t id) const {
    if (id < 0 || id >= sp_.GetPieceSize())
      FS_THROW("token id ", id, " is outside the vocabulary [0, ", sp_.GetPieceSize(), ")");
  }
  sentencepiece::SentencePieceProcessor sp_;
  size_t max_piece_bytes_ = 1;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string& model_path) {
  return std::make_unique<SentencePieceTokenizer>(model_path);
}

}  // namespace flashserve
