// tokenizer.json decoders (see hf_decoder.h). Invalid UTF-8 that byte tokens produce becomes
// U+FFFD exactly as `tokenizers` renders it: ByteLevel with Rust's from_utf8_lossy (one per
// maximal invalid subpart), ByteFallback with one per byte of a run that is not valid as a whole.
#include "tokenizer/hf_decoder.h"

#include "tokenizer/hf_regex.h"
#include "tokenizer/hf_sequence.h"
#include "tokenizer/hf_text.h"

namespace flashserve::hf {

namespace {

constexpr const char* kReplacementChar = "\xEF\xBF\xBD";

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const ByteLevelTable& table = byte_level_table();
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t mark = bytes.size();
      bool all_mapped = true;
      for_each_char(t, [&](uint32_t cp, size_t, size_t) {
        if (!all_mapped) return;
        if (cp < table.char_to_byte.size() && table.char_to_byte[cp] >= 0)
          bytes += char(table.char_to_byte[cp]);
        else
          all_mapped = false;
      });
      if (!all_mapped) {  // a token that is not byte-level text is kept as it is
        bytes.resize(mark);
        bytes += t;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class Metaspace final : public Decoder {
 public:
  Metaspace(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';  // HF drops every one in the first token
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// "<0xNN>" -> NN, else -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = t[size_t(k)];
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
            : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class ByteFallback final : public Decoder {
 public:
  bool has_byte_fallback() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;  // bytes of consecutive <0xNN> tokens
    auto flush = [&] {
      if (run.empty()) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (size_t k = 0; k < run.size(); ++k) out.emplace_back(kReplacementChar);
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      const int b = byte_token(t);
      if (b >= 0) {
        run += char(b);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Strip: removes up to `start` leading and `stop` trailing characters equal to `content`.
class Strip final : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (size_t k = 0; k < start_ && t.compare(begin, content_.size(), content_) == 0 &&
                         begin < end;
           ++k)
        begin += content_.size();
      for (size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                         t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  explicit Replace(const json& j)
      : pattern_(required(j, "pattern", "decoder Replace"), "decoder Replace"),
        content_(field<std::string>(j, "content", "", "decoder Replace")) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class Sequence final : public StageSequence<Decoder> {
 public:
  explicit Sequence(const json& j) : StageSequence(j, "decoders", "decoder Sequence", parse_decoder) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    run_all(&Decoder::decode_chain, tokens);
  }
  bool has_byte_fallback() const override { return any_step(&Decoder::has_byte_fallback); }
};

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, "decoder");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Replace") return std::make_unique<Replace>(j);
  if (type == "Strip") {
    const std::string c = "decoder Strip";
    const std::string content = field<std::string>(j, "content", " ", c);
    if (content.empty() || utf8_sequence_length(content, 0) != content.size())
      config_error(c + ": content must be one character");
    const int64_t start = field<int64_t>(j, "start", 0, c), stop = field<int64_t>(j, "stop", 0, c);
    if (start < 0 || stop < 0 || start > 1000000 || stop > 1000000)
      config_error(c + ": start/stop out of range");
    return std::make_unique<Strip>(content, size_t(start), size_t(stop));
  }
  if (type == "Metaspace") {
    const std::string c = "decoder Metaspace";
    const std::string r = field<std::string>(j, "replacement", "\u2581", c);
    if (r.empty() || utf8_sequence_length(r, 0) != r.size())
      config_error(c + ": replacement must be one character");
    bool strip_first = field<bool>(j, "add_prefix_space", true, c);
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null())
      strip_first = field<std::string>(j, "prepend_scheme", "always", c) != "never";
    return std::make_unique<Metaspace>(r, strip_first);
  }
  if (type == "Sequence") return std::make_unique<Sequence>(j);
  unsupported("decoder", type);
}

}  // namespace flashserve::hf
