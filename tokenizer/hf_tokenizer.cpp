// Tokenizer over a Hugging Face tokenizer.json: the pipeline of `tokenizers` for one sequence.
//   1. split the text on added tokens that match raw text (normalized: false; special tokens only
//      in encode_parsing_special_tokens, see tokenizer.h);
//   2. normalize each remaining part, then split it on the added tokens that match normalized text;
//   3. pre-tokenize each part into pieces; 4. encode each piece with the BPE model;
//   5. with add_bos, the ids the post-processor's single template puts around the sequence.
// Decode maps ids to tokens (special added tokens skipped) and runs the decoder chain.
#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/hf_decoder.h"
#include "tokenizer/hf_normalizer.h"
#include "tokenizer/hf_pre_tokenizer.h"
#include "tokenizer/hf_text.h"
#include "tokenizer/tokenizer_backends.h"
#include "tokenizer/utf8.h"

namespace flashserve {

namespace {

using hf::json;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = true;
};

bool is_word_char(uint32_t cp);

// Leftmost-longest matching of a set of added tokens (what HF's Aho-Corasick automaton does).
class AddedMatcher {
 public:
  void add(std::string pattern, const AddedToken* token) {
    if (pattern.empty()) return;
    entries_.push_back({std::move(pattern), token});
  }
  void finish() {
    std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
      return a.pattern.size() > b.pattern.size();
    });
    for (size_t i = 0; i < entries_.size(); ++i)
      by_first_[static_cast<unsigned char>(entries_[i].pattern[0])].push_back(int32_t(i));
  }
  bool empty() const { return entries_.empty(); }

  // Splits `text` into runs of text (on_text(run, at_start)) and added token ids (into `out`),
  // in order, applying single_word, lstrip and rstrip as HF does.
  // With match_special false, matches of special tokens are passed over and stay text (HF's
  // encode_special_tokens mode: the match is found, then skipped).
  template <class OnText>
  void split(std::string_view text, bool at_start, bool match_special, OnText&& on_text,
             std::vector<int32_t>& out) const {
    size_t start = 0;  // end of the last token taken (after its rstrip)
    size_t pos = 0;    // where the search goes on (after the last match, before rstrip)
    while (pos < text.size()) {
      const Entry* hit = nullptr;
      size_t b = pos;
      for (; b < text.size() && hit == nullptr; ++b)
        for (int32_t idx : by_first_[static_cast<unsigned char>(text[b])]) {
          const Entry& e = entries_[size_t(idx)];
          if (text.compare(b, e.pattern.size(), e.pattern) == 0) {
            hit = &e;
            break;
          }
        }
      if (hit == nullptr) break;
      --b;
      size_t e = b + hit->pattern.size();
      pos = e;
      const AddedToken& tok = *hit->token;
      if (tok.special && !match_special) continue;
      if (tok.single_word && (word_char_before(text, b) || word_char_at(text, e))) continue;
      if (b < start) continue;  // inside the previous token's rstrip
      if (tok.lstrip) b = std::max(start, last_non_space_end(text, start, b));
      if (tok.rstrip) e = first_non_space(text, e);
      if (b > start) on_text(text.substr(start, b - start), at_start && start == 0);
      out.push_back(tok.id);
      start = e;
    }
    if (start < text.size()) on_text(text.substr(start), at_start && start == 0);
  }

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  static bool word_char_before(std::string_view s, size_t b) {
    bool word = false;  // the last character of s[0, b)
    size_t i = b;
    while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
    if (i > 0) {
      --i;
      const size_t n = utf8_sequence_length(s, i);
      if (n > 0) word = is_word_char(hf::decode_utf8(s, i, n));
    }
    return word;
  }
  static bool word_char_at(std::string_view s, size_t e) {
    if (e >= s.size()) return false;
    const size_t n = utf8_sequence_length(s, e);
    return n > 0 && is_word_char(hf::decode_utf8(s, e, n));
  }
  // End of the last non-whitespace character in s[from, b), or `from` when all is whitespace.
  static size_t last_non_space_end(std::string_view s, size_t from, size_t b) {
    size_t end = from;
    hf::for_each_char(s.substr(from, b - from), [&](uint32_t cp, size_t at, size_t n) {
      if (!hf::is_white_space(cp)) end = from + at + n;
    });
    return end;
  }
  static size_t first_non_space(std::string_view s, size_t e) {
    size_t i = e;
    while (i < s.size()) {
      size_t n = utf8_sequence_length(s, i);
      if (n == 0 || !hf::is_white_space(hf::decode_utf8(s, i, n))) break;
      i += n;
    }
    return i;
  }
  std::vector<Entry> entries_;
  std::array<std::vector<int32_t>, 256> by_first_;
};

}  // namespace
}  // namespace flashserve

#include <utf8proc.h>

namespace flashserve {
namespace {

// Rust's char::is_alphanumeric or '_', the word characters of HF's single_word rule.
bool is_word_char(uint32_t cp) {
  if (cp == '_') return true;
  const auto c = utf8proc_category(utf8proc_int32_t(cp));
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

// tokenizer_config.json's "bos_token"/"eos_token": a string or {"content": ...}; "" if absent.
std::string config_token(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return "";
  const json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

class HfTokenizer final : public Tokenizer {
 public:
  HfTokenizer(const json& j, const json& config)
      : bpe_(parse_model(j)),
        normalizer_(hf::parse_normalizer(j.value("normalizer", json()))),
        pre_tokenizer_(hf::parse_pre_tokenizer(j.value("pre_tokenizer", json()))),
        decoder_(hf::parse_decoder(j.value("decoder", json()))) {
    parse_added_tokens(j.value("added_tokens", json::array()));
    parse_post_processor(j.value("post_processor", json()));
    vocab_size_ = int(bpe_.id_to_token().size());
    for (const auto& [id, t] : added_by_id_) vocab_size_ = std::max(vocab_size_, id + 1);
    for (const auto& ids : {prefix_, suffix_})
      for (int32_t id : ids)
        if (id >= vocab_size_)
          hf::config_error("post_processor: special token id " + std::to_string(id) +
                           " is outside the vocabulary");
    bos_id_ = id_of(config_token(config, "bos_token"), template_bos_);
    eos_id_ = id_of(config_token(config, "eos_token"), template_eos_);
    // transformers' tokenizer classes that honour add_bos_token rebuild the template from it.
    if (config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
      const bool has = !prefix_.empty() && prefix_[0] == bos_id_;
      if (!config["add_bos_token"].get<bool>() && has) prefix_.erase(prefix_.begin());
      if (config["add_bos_token"].get<bool>() && !has && bos_id_ >= 0)
        prefix_.insert(prefix_.begin(), bos_id_);
    }
    compute_max_piece_bytes();
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
    return encode_impl(text, add_bos, /*match_special=*/false);
  }

  std::vector<int32_t> encode_parsing_special_tokens(std::string_view text,
                                                     bool add_bos) const override {
    return encode_impl(text, add_bos, /*match_special=*/true);
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (int32_t id : ids) {
      check_id(id);
      auto it = added_by_id_.find(id);
      if (it != added_by_id_.end()) {
        if (!it->second.special) tokens.push_back(it->second.content);
      } else if (size_t(id) < bpe_.id_to_token().size() && !bpe_.id_to_token()[size_t(id)].empty()) {
        tokens.push_back(bpe_.id_to_token()[size_t(id)]);
      }
    }
    std::string text;
    if (decoder_) {
      decoder_->decode_chain(tokens);
      for (const auto& t : tokens) text += t;
    } else {  // HF joins undecoded tokens with spaces
      for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
    }
    return text;
  }

  std::string piece(int32_t id) const override {
    check_id(id);
    auto it = added_by_id_.find(id);
    if (it != added_by_id_.end()) return it->second.content;
    return size_t(id) < bpe_.id_to_token().size() ? bpe_.id_to_token()[size_t(id)] : "";
  }

  std::vector<SpecialToken> special_tokens() const override {
    std::vector<SpecialToken> out;
    for (const AddedToken& t : added_)
      if (t.special) out.push_back({t.content, t.id});
    std::stable_sort(out.begin(), out.end(), [](const SpecialToken& a, const SpecialToken& b) {
      return a.text.size() > b.text.size();
    });
    return out;
  }

  size_t max_piece_bytes() const override { return max_piece_bytes_; }
  bool byte_runs_decode_as_whole() const override { return decoder_ && decoder_->has_byte_fallback(); }
  int vocab_size() const override { return vocab_size_; }
  int bos_id() const override { return bos_id_; }
  int eos_id() const override { return eos_id_; }

 private:
  static const json& parse_model(const json& j) {
    const json& m = hf::required(j, "model", "tokenizer.json");
    const std::string type = hf::type_of(m, "model");
    if (type != "BPE") hf::unsupported("model", type);
    return m;
  }

  void parse_added_tokens(const json& list) {
    if (!list.is_array()) hf::config_error("'added_tokens' is not a list");
    for (const json& a : list) {
      const std::string c = "added_tokens";
      AddedToken t;
      t.content = hf::field<std::string>(a, "content", "", c);
      const int64_t id = hf::field<int64_t>(a, "id", -1, c);
      if (t.content.empty() || id < 0 || id >= (1 << 24))
        hf::config_error("added token without content or with an id outside [0, 2^24)");
      t.id = int32_t(id);
      t.special = hf::field<bool>(a, "special", false, c);
      t.lstrip = hf::field<bool>(a, "lstrip", false, c);
      t.rstrip = hf::field<bool>(a, "rstrip", false, c);
      t.single_word = hf::field<bool>(a, "single_word", false, c);
      t.normalized = hf::field<bool>(a, "normalized", !t.special, c);
      added_.push_back(std::move(t));
    }
    for (const AddedToken& t : added_) {
      added_by_id_[t.id] = t;
      if (!t.normalized) {
        raw_added_.add(t.content, &t);
      } else {
        std::string pattern = t.content;  // matched against normalized text, so normalized too
        if (normalizer_) normalizer_->normalize(pattern);
        normalized_added_.add(pattern, &t);
      }
    }
    raw_added_.finish();
    normalized_added_.finish();
  }

  // TemplateProcessing's "single" (the ids around $A), ByteLevel (no ids), or a Sequence of them.
  void parse_post_processor(const json& p) {
    if (p.is_null()) return;
    const std::string type = hf::type_of(p, "post_processor");
    if (type == "ByteLevel") return;
    if (type == "Sequence") {
      const json& list = hf::required(p, "processors", "post_processor Sequence");
      if (!list.is_array()) hf::config_error("post_processor Sequence: 'processors' is not a list");
      for (const json& s : list) parse_post_processor(s);
      return;
    }
    if (type != "TemplateProcessing") hf::unsupported("post_processor", type);
    const std::string c = "post_processor TemplateProcessing";
    const json& single = hf::required(p, "single", c);
    const json& specials = hf::required(p, "special_tokens", c);
    if (!single.is_array() || !specials.is_object()) hf::config_error(c + ": malformed");
    if (!prefix_.empty() || !suffix_.empty()) hf::config_error(c + ": more than one template");
    bool seen_a = false;
    for (const json& item : single) {
      if (item.contains("Sequence")) {
        if (hf::field<std::string>(item["Sequence"], "id", "", c) != "A")
          hf::config_error(c + ": the single template may only hold $A");
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = hf::field<std::string>(item["SpecialToken"], "id", "", c);
        if (!specials.contains(name)) hf::config_error(c + ": special token '" + name + "' has no ids");
        const json& ids = hf::required(specials[name], "ids", c);
        if (!ids.is_array()) hf::config_error(c + ": ids of '" + name + "' is not a list");
        for (const json& id : ids) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
            hf::config_error(c + ": an id of '" + name + "' is out of range");
          (seen_a ? suffix_ : prefix_).push_back(id.get<int32_t>());
        }
      } else {
        hf::config_error(c + ": an item is neither SpecialToken nor Sequence");
      }
    }
    if (!prefix_.empty()) template_bos_ = prefix_.front();
    if (!suffix_.empty()) template_eos_ = suffix_.back();
  }

  int32_t id_of(const std::string& token, int32_t fallback) const {
    if (token.empty()) return fallback;
    for (const AddedToken& t : added_)
      if (t.content == token) return t.id;
    auto it = bpe_.vocab().find(token);
    return it != bpe_.vocab().end() ? it->second : fallback;
  }

  void compute_max_piece_bytes() {
    size_t m = 4;  // one character, e.g. an unknown one
    for (const auto& t : bpe_.id_to_token()) m = std::max(m, t.size());
    for (const AddedToken& t : added_) m = std::max(m, t.content.size());
    // Parts of the pipeline that can swallow any amount of text: then no bound holds.
    bool unbounded = (normalizer_ && normalizer_->can_shrink()) ||
                     (pre_tokenizer_ && pre_tokenizer_->can_drop_text()) ||
                     (bpe_.fuse_unk() && bpe_.unk_id() >= 0);
    for (const AddedToken& t : added_) unbounded |= t.lstrip || t.rstrip;
    max_piece_bytes_ = unbounded ? kUnbounded : m;
  }

  // Ids past the vocabulary (a model's padding rows) are let through: decode skips them, as it
  // skips holes in the vocabulary, and piece gives "".
  static void check_id(int32_t id) {
    if (id < 0) FS_THROW("token id ", id, " is negative");
  }

  std::vector<int32_t> encode_impl(std::string_view text, bool add_bos, bool match_special) const {
    const size_t bad = utf8_valid_prefix(text);
    if (bad != text.size())
      FS_THROW("invalid UTF-8 in text to encode at byte ", bad, " of ", text.size());
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_bos) out = prefix_;
    raw_added_.split(
        text, true, match_special,
        [&](std::string_view part, bool at_start) { encode_raw(part, at_start, match_special, out); },
        out);
    if (add_bos) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }

  // Text between raw-matched added tokens: normalize, then split on the normalized ones.
  void encode_raw(std::string_view part, bool at_start, bool match_special,
                  std::vector<int32_t>& out) const {
    std::string norm(part);
    if (normalizer_) normalizer_->normalize(norm);
    normalized_added_.split(
        norm, at_start, match_special,
        [&](std::string_view text, bool first) { encode_plain(text, first, out); }, out);
  }

  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& out) const {
    thread_local std::vector<hf::Piece> pieces;
    pieces.clear();
    pieces.push_back({std::string(text), at_start});
    if (pre_tokenizer_) pre_tokenizer_->apply(pieces);
    for (const hf::Piece& p : pieces) bpe_.encode_piece(p.text, out);
  }

  static constexpr size_t kUnbounded = size_t(1) << 24;

  hf::Bpe bpe_;
  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::Decoder> decoder_;
  std::vector<AddedToken> added_;  // never resized after parse_added_tokens (matchers point in)
  std::unordered_map<int32_t, AddedToken> added_by_id_;
  AddedMatcher raw_added_, normalized_added_;
  std::vector<int32_t> prefix_, suffix_;  // add_bos: the template's ids around the text
  int32_t template_bos_ = -1, template_eos_ = -1;
  int vocab_size_ = 0;
  int bos_id_ = -1, eos_id_ = -1;
  size_t max_piece_bytes_ = 64;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(json_path, ec))
    throw Error(json_path + ": tokenizer file does not exist");
  const json j = read_json(json_path);
  const auto config_path = std::filesystem::path(json_path).parent_path() / "tokenizer_config.json";
  json config;
  if (std::filesystem::is_regular_file(config_path, ec)) config = read_json(config_path.string());
  try {
    return std::make_unique<HfTokenizer>(j, config);
  } catch (const json::exception& e) {
    throw Error(json_path + ": malformed tokenizer.json: " + e.what());
  } catch (const Error& e) {
    throw Error(json_path + ": " + e.what());
  }
}

}  // namespace flashserve
