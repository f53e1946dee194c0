// read_call_object: walks the top level of a call object key by key with scan_json_value, noting
// where the name and the arguments are, so that a partial object still yields its committed part.
#include "output_parsers/call_object.h"

#include <nlohmann/json.hpp>

namespace flashserve::output_parsers {
namespace {

// The string a complete JSON string token holds; empty if the token is not a string.
std::string decode_string(std::string_view token) {
  const auto j = nlohmann::json::parse(token, nullptr, /*allow_exceptions=*/false);
  return j.is_string() ? j.get<std::string>() : std::string();
}

}  // namespace

CallObject read_call_object(std::string_view text, size_t pos) {
  CallObject out{JsonStatus::kPartial, text.size()};
  size_t args_begin = 0, args_end = 0;
  bool have_name = false, have_args = false;
  // Fills `out` with the status and end, and the name and arguments if the call is committed.
  auto finish = [&](JsonStatus status, size_t end) {
    out.status = status;
    out.end = end;
    out.committed = have_name && have_args && args_end > args_begin;
    if (out.committed) out.arguments = text.substr(args_begin, args_end - args_begin);
    if (!out.committed) out.name.clear();
    return out;
  };
  size_t i = skip_json_space(text, pos + 1);
  if (i < text.size() && text[i] == '}') return finish(JsonStatus::kComplete, i + 1);
  while (true) {
    if (i == text.size()) return finish(JsonStatus::kPartial, i);
    if (text[i] != '"') return finish(JsonStatus::kInvalid, i);
    const JsonSpan key_span = scan_json_value(text, i);
    if (key_span.status != JsonStatus::kComplete) return finish(key_span.status, key_span.end);
    const std::string key = decode_string(text.substr(i, key_span.end - i));
    i = skip_json_space(text, key_span.end);
    if (i == text.size()) return finish(JsonStatus::kPartial, i);
    if (text[i] != ':') return finish(JsonStatus::kInvalid, i);
    i = skip_json_space(text, i + 1);
    if (i == text.size()) return finish(JsonStatus::kPartial, i);
    const JsonSpan value = scan_json_value(text, i);
    if ((key == "arguments" || key == "parameters") && !have_args) {
      have_args = true;
      args_begin = i;
      args_end = value.end;
    } else if (key == "name" && !have_name && value.status == JsonStatus::kComplete) {
      out.name = decode_string(text.substr(i, value.end - i));
      have_name = !out.name.empty();
      if (!have_name) return finish(JsonStatus::kInvalid, i);  // a name that is not a string
    }
    if (value.status != JsonStatus::kComplete) return finish(value.status, value.end);
    i = skip_json_space(text, value.end);
    if (i == text.size()) return finish(JsonStatus::kPartial, i);
    if (text[i] == '}') return finish(JsonStatus::kComplete, i + 1);
    if (text[i] != ',') return finish(JsonStatus::kInvalid, i);
    i = skip_json_space(text, i + 1);
  }
}

}  // namespace flashserve::output_parsers
