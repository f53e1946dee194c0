// What follows each format's start marker: one Hermes call up to </tool_call>; Mistral's JSON array
// of calls or its name[ARGS]{...} form; Llama's calls separated by ';' or whitespace. A call that
// is not committed (docs/TOOL_CALLING.md) leaves its text to the content.
#include <cctype>

#include "output_parsers/call_object.h"
#include "output_parsers/tool_call_scan.h"

namespace flashserve::output_parsers {
namespace {

using Kind = CallsRead::Kind;

// What the reader does after take_object.
enum class Next {
  kAfterObject,  // the call is complete: read what follows it
  kDecided,      // `read` is final (held, or a call cut short)
  kUncommitted,  // no call: the text belongs to the content
};

// Adds the call `o` holds, if committed, to read.calls.
Next take_object(const CallObject& o, bool final, CallsRead& read) {
  if (o.status == JsonStatus::kPartial && !final) {
    if (o.committed) read.calls.push_back(Segment{.is_call = true, .name = o.name, .arguments = o.arguments});
    read.kind = Kind::kHeld;
    return Next::kDecided;
  }
  if (!o.committed) return Next::kUncommitted;
  read.calls.push_back(Segment{.is_call = true, .name = o.name, .arguments = o.arguments});
  if (o.status == JsonStatus::kComplete) return Next::kAfterObject;
  read.kind = Kind::kDone;  // cut short by the end of output, or broken inside: content resumes
  read.resume = o.end;
  return Next::kDecided;
}

// A failed object at text[at]: the whole read is malformed when it holds no call yet; otherwise
// the calls stand and the content resumes at the object.
CallsRead fail_at(CallsRead read, size_t at) {
  read.kind = read.calls.empty() ? Kind::kMalformed : Kind::kDone;
  read.resume = at;
  return read;
}

// The end of the text where an object or a separator may come next.
CallsRead end_of_text(CallsRead read, size_t at, bool final) {
  if (!final) {
    read.kind = Kind::kHeld;
    return read;
  }
  return fail_at(std::move(read), at);
}

// Reads the call object at text[i] (after whitespace) into read.calls. True when the call is
// complete, with i moved past it and the whitespace after it; false when `read` is decided.
bool read_next_call(std::string_view text, size_t& i, bool final, CallsRead& read) {
  i = skip_json_space(text, i);
  if (i == text.size()) {
    read = end_of_text(std::move(read), i, final);
    return false;
  }
  if (text[i] != '{') {
    read = fail_at(std::move(read), i);
    return false;
  }
  const CallObject o = read_call_object(text, i);
  const Next next = take_object(o, final, read);
  if (next == Next::kUncommitted) read = fail_at(std::move(read), i);
  if (next != Next::kAfterObject) return false;
  i = skip_json_space(text, o.end);
  return true;
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

CallsRead read_mistral_array(std::string_view text, size_t open, bool final) {
  CallsRead read{Kind::kMalformed};
  size_t i = open + 1;
  while (read_next_call(text, i, final, read)) {
    if (i == text.size()) return end_of_text(std::move(read), i, final);
    if (text[i] != ',') {
      read.kind = Kind::kDone;
      read.resume = text[i] == ']' ? i + 1 : i;
      return read;
    }
    ++i;
  }
  return read;
}

// name[ARGS]{...}: committed once the arguments have begun.
CallsRead read_mistral_named(std::string_view text, size_t begin, bool final) {
  static constexpr std::string_view kArgs = "[ARGS]";
  CallsRead read{Kind::kMalformed};
  size_t n = begin;
  while (n < text.size() && is_name_char(text[n])) ++n;
  if (n == begin) return read;
  const std::string_view rest = text.substr(n);
  if (!rest.starts_with(kArgs)) {
    if (!final && kArgs.starts_with(rest)) read.kind = Kind::kHeld;
    return read;
  }
  const size_t a = skip_json_space(text, n + kArgs.size());
  if (a == text.size()) {
    if (!final) read.kind = Kind::kHeld;
    return read;
  }
  const JsonSpan v = scan_json_value(text, a);
  if (v.end == a) return read;  // the arguments' first byte is not JSON
  read.calls.push_back(Segment{.is_call = true, .name = std::string(text.substr(begin, n - begin)),
                               .arguments = text.substr(a, v.end - a)});
  read.kind = v.status == JsonStatus::kPartial && !final ? Kind::kHeld : Kind::kDone;
  read.resume = v.end;
  return read;
}

}  // namespace

CallsRead read_hermes_calls(std::string_view text, size_t pos, bool final) {
  static constexpr std::string_view kEnd = "</tool_call>";
  CallsRead read{Kind::kMalformed};
  size_t i = pos;
  if (!read_next_call(text, i, final, read)) return read;
  const std::string_view rest = text.substr(i);
  read.kind = Kind::kDone;
  read.resume = i;  // anything but the end marker is content again
  if (rest.starts_with(kEnd)) {
    read.resume = i + kEnd.size();
  } else if (kEnd.starts_with(rest)) {
    // More output may finish the end marker; output cut off inside it (max_tokens) ends the
    // call there: a partial marker is never content.
    if (!final) read.kind = Kind::kHeld;
    else read.resume = text.size();
  }
  return read;
}

CallsRead read_mistral_calls(std::string_view text, size_t pos, bool final) {
  const size_t i = skip_json_space(text, pos);
  if (i == text.size()) return end_of_text(CallsRead{Kind::kMalformed}, i, final);
  if (text[i] == '[') return read_mistral_array(text, i, final);
  return read_mistral_named(text, i, final);
}

CallsRead read_llama3_calls(std::string_view text, size_t pos, bool final) {
  CallsRead read{Kind::kMalformed};
  size_t i = pos;
  while (read_next_call(text, i, final, read)) {
    if (i < text.size() && text[i] == ';') i = skip_json_space(text, i + 1);
    if (i < text.size() && text[i] != '{') {
      read.kind = Kind::kDone;  // text after the calls is content
      read.resume = i;
      return read;
    }
  }
  return read;
}

}  // namespace flashserve::output_parsers
