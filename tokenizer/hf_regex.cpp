// PCRE2 wrapper for tokenizer.json patterns (see hf_regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/hf_regex.h"

#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "tokenizer/hf_json.h"

namespace flashserve::hf {

namespace {

// Bounds backtracking, so a hostile pattern in a tokenizer.json cannot hang encode.
constexpr uint32_t kMatchLimit = 10'000'000;

struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(32, nullptr);
  pcre2_match_context* context = [] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(c, kMatchLimit);
    return c;
  }();
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code_ == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    config_error(str_cat(what, ": regex '", pattern, "' does not compile at offset ", offset, ": ",
                         reinterpret_cast<const char*>(message)));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  ThreadMatchState& st = thread_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  while (start <= s.size()) {
    // The text is validated UTF-8 before it gets here, so PCRE2's own check is skipped.
    const int rc = jit_ ? pcre2_jit_match(code_, subject, s.size(), start, 0, st.data, st.context)
                        : pcre2_match(code_, subject, s.size(), start, PCRE2_NO_UTF_CHECK, st.data,
                                      st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      FS_THROW("tokenizer regex failed: ", reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t b = ov[0], e = ov[1];
    if (e < b || e > s.size()) break;  // \K tricks can report odd ranges: stop there
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {  // empty match: step over one character
      if (b >= s.size()) break;
      start = b + 1;
      while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

Pattern::Pattern(const nlohmann::json& j, const std::string& what) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    literal_ = j["String"].get<std::string>();
  } else if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    regex_ = std::make_unique<Regex>(j["Regex"].get<std::string>(), what);
  } else {
    config_error(what + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
  }
}

void Pattern::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_ != nullptr) return regex_->find_all(s, out);
  out.clear();
  if (literal_.empty()) return;
  for (size_t pos = s.find(literal_); pos != std::string_view::npos;
       pos = s.find(literal_, pos + literal_.size()))
    out.emplace_back(pos, pos + literal_.size());
}

void Pattern::replace_all(std::string& s, const std::string& content) const {
  thread_local std::vector<std::pair<size_t, size_t>> matches;  // reused: no allocation per call
  find_all(s, matches);
  if (matches.empty()) return;
  std::string out;
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    out.append(s, prev, b - prev);
    out += content;
    prev = e;
  }
  out.append(s, prev, std::string::npos);
  s = std::move(out);
}

}  // namespace flashserve::hf
