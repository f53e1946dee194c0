// Tokenizer over a Hugging Face tokenizer.json: the pipeline of `tokenizers` for one sequence.
//   1. split the text on added tokens that match raw text (normalized: false; which occurrences
//      of special tokens count: none in encode, all in encode_parsing_special_tokens, those
//      outside the messages in encode_chat_prompt, see tokenizer.h);
//   2. normalize each remaining part, then split it on the added tokens that match normalized text;
//   3. pre-tokenize each part into pieces; 4. encode each piece with the BPE model;
//   5. with add_bos, the ids the post-processor's single template puts around the sequence.
// Decode maps ids to tokens (special added tokens skipped) and runs the decoder chain.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/hf_added_tokens.h"
#include "tokenizer/hf_bpe.h"
#include "tokenizer/hf_decoder.h"
#include "tokenizer/hf_normalizer.h"
#include "tokenizer/hf_pre_tokenizer.h"
#include "tokenizer/special_split.h"
#include "tokenizer/tokenizer_backends.h"
#include "tokenizer/utf8.h"

namespace flashserve {

namespace {

using hf::json;
using hf::AddedMatcher;
using hf::AddedToken;
using hf::SpecialFilter;

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
    return encode_impl(text, add_bos, {SpecialFilter::Mode::kNone});
  }

  std::vector<int32_t> encode_parsing_special_tokens(std::string_view text,
                                                     bool add_bos) const override {
    return encode_impl(text, add_bos, {SpecialFilter::Mode::kAll});
  }

  std::vector<int32_t> encode_chat_prompt(std::string_view text,
                                          const ByteRanges& literal) const override {
    return encode_impl(text, false, {SpecialFilter::Mode::kOutsideMessages, &literal});
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
        // HF's id-to-token (and so decode) gives a normalized token in its normalized form.
        added_by_id_[t.id].content = pattern;
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

  std::vector<int32_t> encode_impl(std::string_view text, bool add_bos,
                                   const SpecialFilter& specials) const {
    const size_t bad = utf8_valid_prefix(text);
    if (bad != text.size())
      FS_THROW("invalid UTF-8 in text to encode at byte ", bad, " of ", text.size());
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 4);
    if (add_bos) out = prefix_;
    raw_added_.split(
        text, true, specials,
        [&](std::string_view part, bool at_start) {
          encode_raw(part, at_start, normalized_filter(specials, text, part), out);
        },
        out);
    if (add_bos) out.insert(out.end(), suffix_.begin(), suffix_.end());
    return out;
  }

  // The filter for special tokens matched after normalization in `part` (a stretch of `text`
  // between raw-matched tokens): normalized offsets do not map back to the text's, so in a chat
  // prompt they count only where the whole stretch is the template's.
  static SpecialFilter normalized_filter(const SpecialFilter& specials, std::string_view text,
                                         std::string_view part) {
    if (specials.mode != SpecialFilter::Mode::kOutsideMessages) return specials;
    const size_t begin = size_t(part.data() - text.data());
    return {touches_ranges(*specials.messages, begin, begin + part.size())
                ? SpecialFilter::Mode::kNone
                : SpecialFilter::Mode::kAll};
  }

  // Text between raw-matched added tokens: normalize, then split on the normalized ones.
  void encode_raw(std::string_view part, bool at_start, const SpecialFilter& specials,
                  std::vector<int32_t>& out) const {
    std::string norm(part);
    if (normalizer_) normalizer_->normalize(norm);
    normalized_added_.split(
        norm, at_start, specials,
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
