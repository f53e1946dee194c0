// The JSON building blocks every schema rule is made of: any value, strings (with length bounds),
// numbers, integers (with ranges: number_range.h), literals, and the separators with the chosen
// whitespace policy. Each block is built once per grammar and reused.
#pragma once

#include <cstdint>
#include <optional>

#include "structured/grammar.h"

namespace flashserve::structured {

// Compact: no whitespace anywhere (the output is what JSON.stringify writes). Spaces: one optional
// space after ',' and ':' (what json.dumps writes); never more, so a model cannot loop on blanks.
enum class JsonWhitespace { kCompact, kSpaces };

class JsonGrammar {
 public:
  JsonGrammar(GrammarBuilder& b, JsonWhitespace ws) : b_(b), ws_(ws) {}

  Sym value();        // any JSON value
  Sym any_object();   // any JSON object
  Sym any_array();
  Sym any_string();   // "..." with any content
  Sym string_char();  // one character of string content: UTF-8 or an escape
  Sym string_length(int min, int max);  // max < 0: unbounded; counts characters
  Sym number();
  Sym integer();
  Sym boolean();
  Sym null();
  Seq comma();        // ',' and the policy's whitespace
  Seq colon();

  GrammarBuilder& builder() { return b_; }

 private:
  Seq separator(char c);
  GrammarBuilder& b_;
  JsonWhitespace ws_;
  int32_t value_ = -1, object_ = -1, array_ = -1, string_ = -1, char_ = -1, number_ = -1,
          integer_ = -1, boolean_ = -1, null_ = -1;
};

}  // namespace flashserve::structured
