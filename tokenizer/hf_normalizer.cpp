// tokenizer.json normalizers (see hf_normalizer.h). Unicode normalization is utf8proc's.
#include "tokenizer/hf_normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <vector>

#include "tokenizer/hf_regex.h"

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

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  explicit Replace(const json& j)
      : pattern_(required(j, "pattern", "normalizer Replace"), "normalizer Replace"),
        content_(field<std::string>(j, "content", "", "normalizer Replace")) {}
  void normalize(std::string& text) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    pattern_.find_all(text, matches);
    if (matches.empty()) return;
    std::string out;
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      out.append(text, prev, b - prev);
      out += content_;
      prev = e;
    }
    out.append(text, prev, std::string::npos);
    text = std::move(out);
  }
  bool can_shrink() const override {
    return pattern_.is_regex() || content_.size() < pattern_.literal().size();
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& s : steps_) s->normalize(text);
  }
  bool can_shrink() const override {
    for (const auto& s : steps_)
      if (s->can_shrink()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "normalizer");
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(false);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(true);
  if (type == "Prepend")
    return std::make_unique<Prepend>(field<std::string>(j, "prepend", "", "normalizer Prepend"));
  if (type == "Replace") return std::make_unique<Replace>(j);
  if (type == "Sequence") {
    const json& list = required(j, "normalizers", "normalizer Sequence");
    if (!list.is_array()) config_error("normalizer Sequence: 'normalizers' is not a list");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const json& s : list)
      if (auto n = parse_normalizer(s)) steps.push_back(std::move(n));
    return std::make_unique<Sequence>(std::move(steps));
  }
  unsupported("normalizer", type);
}

}  // namespace flashserve::hf
