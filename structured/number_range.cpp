// Digit-wise range grammars: a range of same-length decimal strings splits into a shared prefix,
// a middle digit span followed by free digits, and the two edge cases, recursively.
#include "structured/number_range.h"

#include <string>
#include <vector>

namespace flashserve::structured {

namespace {

Sym digit_span(GrammarBuilder& b, char lo, char hi) { return b.byte_range(lo, hi); }

// Suffixes of length |lo| that are >= lo, <= hi, or between (all the same length).
Seq same_length(GrammarBuilder& b, const std::string& lo, const std::string& hi);

Seq at_least(GrammarBuilder& b, const std::string& lo) {
  return same_length(b, lo, std::string(lo.size(), '9'));
}
Seq at_most(GrammarBuilder& b, const std::string& hi) {
  return same_length(b, std::string(hi.size(), '0'), hi);
}

Seq same_length(GrammarBuilder& b, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return {};
  if (lo == std::string(lo.size(), '0') && hi == std::string(hi.size(), '9'))
    return {b.repeat({digit_span(b, '0', '9')}, static_cast<int>(lo.size()), static_cast<int>(lo.size()))};
  const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
  if (lo[0] == hi[0]) {
    Seq s{b.byte(static_cast<uint8_t>(lo[0]))};
    Seq rest = same_length(b, lo_rest, hi_rest);
    s.insert(s.end(), rest.begin(), rest.end());
    return s;
  }
  std::vector<Seq> alts;
  Seq first{b.byte(static_cast<uint8_t>(lo[0]))};
  Seq r1 = at_least(b, lo_rest);
  first.insert(first.end(), r1.begin(), r1.end());
  alts.push_back(first);
  if (hi[0] - lo[0] > 1) {
    Seq mid{digit_span(b, static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1))};
    if (!lo_rest.empty()) mid.push_back(b.repeat({digit_span(b, '0', '9')}, lo_rest.size(), lo_rest.size()));
    alts.push_back(mid);
  }
  Seq last{b.byte(static_cast<uint8_t>(hi[0]))};
  Seq r2 = at_most(b, hi_rest);
  last.insert(last.end(), r2.begin(), r2.end());
  alts.push_back(last);
  return {GrammarBuilder::rule(b.rule_of(alts))};
}

// Unsigned decimal strings without leading zeros in [lo, hi]; hi empty: unbounded.
Sym unsigned_range(GrammarBuilder& b, uint64_t lo, std::optional<uint64_t> hi) {
  const std::string los = std::to_string(lo);
  const size_t max_len = hi ? std::to_string(*hi).size() : los.size();
  std::vector<Seq> alts;
  for (size_t len = los.size(); len <= max_len; ++len) {
    std::string a = len == los.size() ? los : "1" + std::string(len - 1, '0');
    std::string z = hi && len == max_len ? std::to_string(*hi) : std::string(len, '9');
    alts.push_back(same_length(b, a, z));
  }
  if (!hi) {  // every longer number
    alts.push_back({digit_span(b, '1', '9'), b.repeat({digit_span(b, '0', '9')}, static_cast<int>(los.size()), -1)});
  }
  return GrammarBuilder::rule(b.rule_of(alts));
}

uint64_t magnitude(int64_t v) { return v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v); }

Sym fraction(GrammarBuilder& b) {
  return b.optional({b.byte('.'), b.repeat({b.byte_range('0', '9')}, 1, -1)});
}

}  // namespace

Sym integer_range(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Seq> alts;
  if (!hi || *hi >= 0) {
    uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    alts.push_back({unsigned_range(b, from, hi ? std::optional<uint64_t>(*hi) : std::nullopt)});
  }
  if (!lo || *lo < 0) {
    uint64_t from = hi && *hi < 0 ? magnitude(*hi) : 1;
    std::optional<uint64_t> to = lo ? std::optional<uint64_t>(magnitude(*lo)) : std::nullopt;
    alts.push_back({b.byte('-'), unsigned_range(b, from, to)});
  }
  return GrammarBuilder::rule(b.rule_of(alts));
}

Sym number_range(GrammarBuilder& b, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<Seq> alts;
  // x >= 0: an integer part p in [max(lo, 0), hi - 1] with any fraction, or exactly hi.
  if (!hi || *hi >= 0) {
    uint64_t from = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    if (!hi) {
      alts.push_back({unsigned_range(b, from, std::nullopt), fraction(b)});
    } else {
      if (static_cast<uint64_t>(*hi) > from)
        alts.push_back({unsigned_range(b, from, static_cast<uint64_t>(*hi) - 1), fraction(b)});
      alts.push_back({unsigned_range(b, static_cast<uint64_t>(*hi), static_cast<uint64_t>(*hi))});
    }
  }
  // x < 0 (or -0...): "-" and a magnitude m in [max(-hi, 0), -lo], the same way.
  if (!lo || *lo < 0) {
    uint64_t from = hi && *hi < 0 ? magnitude(*hi) : 0;
    if (!lo) {
      alts.push_back({b.byte('-'), unsigned_range(b, from, std::nullopt), fraction(b)});
    } else {
      uint64_t to = magnitude(*lo);
      if (to > from) alts.push_back({b.byte('-'), unsigned_range(b, from, to - 1), fraction(b)});
      alts.push_back({b.byte('-'), unsigned_range(b, to, to)});
    }
  }
  return GrammarBuilder::rule(b.rule_of(alts));
}

}  // namespace flashserve::structured
