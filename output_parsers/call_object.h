// One tool call written as a JSON object, {"name": "...", "arguments": {...}} (or "parameters",
// Llama's key), read from a prefix of the model's output. The call counts as the model's once its
// name is read and its arguments have begun: from then on a stream has already shown it to the client.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "output_parsers/json_scan.h"

namespace flashserve::output_parsers {

struct CallObject {
  JsonStatus status;            // of the whole object, as scan_json_value would say
  size_t end;                   // past '}' (kComplete), the offending byte (kInvalid), text end
  bool committed = false;       // a non-empty string name is read and the arguments have begun
  std::string name{};           // when committed
  std::string_view arguments{}; // the arguments' JSON text as written, so far (when committed)
};

// Reads the object starting at text[pos] == '{'. Keys other than name/arguments/parameters are
// skipped; the first occurrence of each wins. The arguments are kept verbatim (not re-serialised).
CallObject read_call_object(std::string_view text, size_t pos);

}  // namespace flashserve::output_parsers
