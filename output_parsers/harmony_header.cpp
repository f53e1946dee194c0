// parse_harmony_header: a harmony message header, whole or as a valid beginning. The parts may
// come in either of the orders gpt-oss writes: "<|channel|>commentary to=functions.f
// <|constrain|>json" or "<|start|>assistant to=functions.f<|channel|>commentary json".
#include "output_parsers/harmony_parser.h"

#include <cctype>

namespace flashserve::output_parsers {
namespace {

using Status = HarmonyHeader::Status;

enum class Peek { kMatch, kPartial, kMismatch };

// Whether text[i...] starts with lit, or ends inside a beginning of it.
Peek peek(std::string_view text, size_t i, std::string_view lit) {
  const std::string_view rest = text.substr(i);
  if (rest.starts_with(lit)) return Peek::kMatch;
  return lit.starts_with(rest) ? Peek::kPartial : Peek::kMismatch;
}

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
         c == ':' || c == '/';
}

std::string_view read_word(std::string_view text, size_t& i) {
  const size_t begin = i;
  while (i < text.size() && is_word_char(text[i])) ++i;
  return text.substr(begin, i - begin);
}

}  // namespace

bool template_is_harmony(std::string_view chat_template) {
  return chat_template.find("<|channel|>") != std::string_view::npos;
}

HarmonyHeader parse_harmony_header(std::string_view text, bool complete, bool first) {
  HarmonyHeader h{Status::kInvalid};
  // The text ran out where more was needed: a beginning, unless <|message|> already followed.
  const HarmonyHeader ran_out{complete ? Status::kInvalid : Status::kPartial};
  if (text.size() > kMaxHarmonyHeaderBytes) return h;
  size_t i = 0;
  // The role: written by the prompt for the first message, "<|start|>assistant" after that.
  const Peek start = peek(text, 0, "<|start|>");
  if (start == Peek::kPartial) return ran_out;
  if (start == Peek::kMatch) {
    i = 9;
    const Peek role = peek(text, i, "assistant");
    if (role == Peek::kPartial) return ran_out;
    if (role == Peek::kMismatch) return h;
    i += 9;
  } else if (!first) {
    return h;
  }
  bool have_channel = false, have_recipient = false, have_type = false;
  // Reads the word after a marker into *field; false when there is none.
  auto word_after = [&](size_t len, std::string* field, bool* seen) {
    if (*seen) return false;
    i += len;
    const std::string_view w = read_word(text, i);
    if (w.empty()) return false;
    if (field != nullptr) *field = std::string(w);
    *seen = true;
    return true;
  };
  while (i < text.size()) {
    if (text[i] == ' ') {
      ++i;
      continue;
    }
    Peek any_partial = Peek::kMismatch;
    bool ok = false, matched = false;
    struct Part {
      std::string_view lit;
      std::string* field;  // where its word goes (null: not kept)
      bool* seen;
    };
    for (const auto& [lit, field, seen] : {Part{"<|channel|>", &h.channel, &have_channel},
                                           Part{"<|constrain|>", nullptr, &have_type},
                                           Part{"to=", &h.recipient, &have_recipient}}) {
      const Peek p = peek(text, i, lit);
      if (p == Peek::kMatch) {
        matched = true;
        ok = word_after(lit.size(), field, seen);
        break;
      }
      if (p == Peek::kPartial) any_partial = p;
    }
    if (matched) {
      if (!ok) return i == text.size() ? ran_out : h;
      continue;
    }
    if (any_partial == Peek::kPartial || peek(text, i, "<|message|>") == Peek::kPartial) {
      return ran_out;
    }
    // A bare content type after the channel: "commentary json".
    if (have_channel && !have_type && is_word_char(text[i])) {
      read_word(text, i);
      have_type = true;
      continue;
    }
    return h;
  }
  if (!complete) return ran_out;
  if (!have_channel) return h;
  h.status = Status::kComplete;
  return h;
}

}  // namespace flashserve::output_parsers
