// tokenizer.json normalizers (see hf_normalizer.h). Unicode normalization is utf8proc's.
#include "tokenizer/hf_normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_sequence.h"

namespace flashserve::hf {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(bool compat) : compat_(compat) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    bool ascii = true;  // ASCII is already in every normal form
    for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
    if (ascii) return;
    utf8proc_uint8_t* out = nullptr;
    const int options = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (compat_ ? UTF8PROC_COMPAT : 0);
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     utf8proc_ssize_t(text.size()), &out, utf8proc_option_t(options));
    if (n < 0) throw Error(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
    text.assign(reinterpret_cast<const char*>(out), size_t(n));
    std::free(out);
  }

 private:
  bool compat_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  explicit ReplaceNormalizer(const json& j)
      : pattern_(required(j, "pattern", "normalizer Replace"), "normalizer Replace"),
        content_(field<std::string>(j, "content", "", "normalizer Replace")) {}
  void normalize(std::string& text) const override { pattern_.replace_all(text, content_); }
  bool can_shrink() const override {
    return pattern_.is_regex() || content_.size() < pattern_.literal().size();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class NormalizerSequence final : public StageSequence<Normalizer> {
 public:
  explicit NormalizerSequence(const json& j)
      : StageSequence(j, "normalizers", "normalizer Sequence", parse_normalizer) {}
  void normalize(std::string& text) const override { run_all(&Normalizer::normalize, text); }
  bool can_shrink() const override { return any_step(&Normalizer::can_shrink); }
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "normalizer");
  if (type == "NFC" || type == "NFKC") return std::make_unique<UnicodeNormalizer>(type == "NFKC");
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(
        field<std::string>(j, "prepend", "", "normalizer Prepend"));
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j);
  if (type == "Sequence") return std::make_unique<NormalizerSequence>(j);
  unsupported("normalizer", type);
}

}  // namespace flashserve::hf
