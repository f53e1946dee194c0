// Fuzzes the grammar compilers (structured/): any schema text (strict or best effort), pattern or
// choice list either compiles to a grammar whose every element points inside it, or throws
// SchemaError; small limits keep each input's work bounded, as in the server. Best effort reports
// a dropped keyword with a path into the schema. The validator of the original schema reads any
// schema and value text without crashing.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>

#include "structured/schema_compiler.h"
#include "structured/schema_error.h"
#include "structured/schema_validator.h"
#include "tests/fuzz/fuzz_file.h"

using namespace flashserve;
using namespace flashserve::structured;

namespace {
void check(const Grammar& g) {
  FUZZ_ASSERT(g.root >= 0 && static_cast<size_t>(g.root) < g.rules.size(), "root");
  for (const Element& e : g.elements) {
    if (e.kind == Element::Kind::kRule) FUZZ_ASSERT(static_cast<size_t>(e.id) < g.rules.size(), "rule id");
    if (e.kind == Element::Kind::kBytes) FUZZ_ASSERT(static_cast<size_t>(e.id) < g.byte_sets.size(), "set id");
  }
  FUZZ_ASSERT(!g.elements.empty() && g.elements.back().kind == Element::Kind::kEnd, "closed");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  SchemaOptions o;
  o.limits.max_grammar_elements = 1 << 16;
  o.limits.max_repeat = 64;
  const int mode = in.ConsumeIntegralInRange<int>(0, 3);
  try {
    if (mode == 0) {
      o.strict = in.ConsumeBool();
      SchemaReport report;
      check(compile_json_schema(in.ConsumeRemainingBytesAsString(), o, &report));
      for (const auto& d : report.dropped) FUZZ_ASSERT(!d.keyword.empty() && !d.path.empty(), "a dropped keyword has a path");
      FUZZ_ASSERT(o.strict ? report.dropped.empty() : true, "strict drops nothing");
    }
    if (mode == 3) {
      const std::string schema = in.ConsumeRandomLengthString(512);
      SchemaValidator v(schema);
      (void)v.validate(in.ConsumeRemainingBytesAsString());
    }
    if (mode == 1) check(compile_regex_grammar(in.ConsumeRemainingBytesAsString(), o));
    if (mode == 2) {
      std::vector<std::string> choices(in.ConsumeIntegralInRange<int>(0, 8));
      for (auto& c : choices) c = in.ConsumeRandomLengthString(16);
      check(compile_choice_grammar(choices, o));
    }
  } catch (const SchemaError&) {
  }
  return 0;
}
