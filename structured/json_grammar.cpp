// JSON's own grammar (RFC 8259) over bytes, with the whitespace policy of JsonWhitespace.
#include "structured/json_grammar.h"

#include <cctype>
#include <string>

#include "structured/char_set.h"

namespace flashserve::structured {

namespace {
// Makes `slot` the rule built by `make` the first time and returns it.
template <class F>
Sym once(int32_t& slot, F make) {
  if (slot < 0) slot = make();
  return GrammarBuilder::rule(slot);
}
}  // namespace

Seq JsonGrammar::separator(char c) {
  Seq s{b_.byte(static_cast<uint8_t>(c))};
  if (ws_ == JsonWhitespace::kSpaces) s.push_back(b_.optional({b_.byte(' ')}));
  return s;
}
Seq JsonGrammar::comma() { return separator(','); }
Seq JsonGrammar::colon() { return separator(':'); }

Sym JsonGrammar::string_char() {
  return once(char_, [&] {
    CharSet plain = CharSet::range(0x20, kMaxCodePoint);
    CharSet specials = CharSet::range('"', '"');
    specials.add('\\', '\\');
    plain = plain.intersect(specials.complement());
    ByteSet simple;
    for (char c : std::string("\"\\/bfnrt")) simple.set(static_cast<uint8_t>(c));
    ByteSet hex;
    for (int c = 0; c < 256; ++c) hex.set(c, std::isxdigit(c) != 0);
    // \uXXXX outside D800-DFFF (a first digit other than d): a lone surrogate is no character,
    // and a pair would count as one character where minLength counts two escapes.
    ByteSet hex_no_d = hex;
    hex_no_d.reset('d').reset('D');
    Seq unicode{b_.byte('\\'), b_.byte('u'), b_.bytes(hex_no_d), b_.bytes(hex), b_.bytes(hex), b_.bytes(hex)};
    return b_.rule_of({{char_set_rule(b_, plain, CharContext::kRaw)},
                       {b_.byte('\\'), b_.bytes(simple)},
                       unicode});
  });
}

Sym JsonGrammar::any_string() {
  return once(string_, [&] {
    return b_.rule_of({{b_.byte('"'), b_.star({string_char()}), b_.byte('"')}});
  });
}

Sym JsonGrammar::string_length(int min, int max) {
  if (min == 0 && max < 0) return any_string();
  return GrammarBuilder::rule(b_.rule_of({{b_.byte('"'), b_.repeat({string_char()}, min, max), b_.byte('"')}}));
}

Sym JsonGrammar::integer() {
  return once(integer_, [&] {
    Sym digits = b_.star({b_.byte_range('0', '9')});
    int32_t magnitude = b_.rule_of({{b_.byte('0')}, {b_.byte_range('1', '9'), digits}});
    return b_.rule_of({{b_.optional({b_.byte('-')}), GrammarBuilder::rule(magnitude)}});
  });
}

Sym JsonGrammar::number() {
  return once(number_, [&] {
    Sym digit = b_.byte_range('0', '9');
    Sym digits1 = b_.repeat({digit}, 1, -1);
    ByteSet e;
    e.set('e').set('E');
    ByteSet sign;
    sign.set('+').set('-');
    Sym frac = b_.optional({b_.byte('.'), digits1});
    Sym exp = b_.optional({b_.bytes(e), b_.optional({b_.bytes(sign)}), digits1});
    return b_.rule_of({{integer(), frac, exp}});
  });
}

Sym JsonGrammar::boolean() {
  return once(boolean_, [&] { return b_.rule_of({b_.literal("true"), b_.literal("false")}); });
}

Sym JsonGrammar::null() {
  return once(null_, [&] { return b_.rule_of({b_.literal("null")}); });
}

Sym JsonGrammar::any_object() {
  return once(object_, [&] {
    Seq pair{any_string()};
    for (Sym s : colon()) pair.push_back(s);
    pair.push_back(value());
    Seq more = comma();
    more.insert(more.end(), pair.begin(), pair.end());
    Seq body = pair;
    body.push_back(b_.star(more));
    return b_.rule_of({{b_.byte('{'), b_.optional(body), b_.byte('}')}});
  });
}

Sym JsonGrammar::any_array() {
  return once(array_, [&] {
    Seq more = comma();
    more.push_back(value());
    return b_.rule_of({{b_.byte('['), b_.optional({value(), b_.star(more)}), b_.byte(']')}});
  });
}

Sym JsonGrammar::value() {
  // value_ is set before the alternatives are built: objects and arrays refer back to it.
  if (value_ >= 0) return GrammarBuilder::rule(value_);
  value_ = b_.new_rule();
  for (Sym s : {any_object(), any_array(), any_string(), number(), boolean(), null()})
    b_.add_alt(value_, {s});
  return GrammarBuilder::rule(value_);
}

}  // namespace flashserve::structured
