// CharSet arithmetic, and its lowering to UTF-8 byte-range sequences (split so that every
// sequence is a product of byte ranges) with JSON escapes where the context asks for them.
#include "structured/char_set.h"

#include <algorithm>
#include <string>

#include "core/json_text.h"
#include "tokenizer/hf_text.h"

namespace flashserve::structured {

namespace {
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

// Emits byte-range sequences for [lo, hi], both of the same UTF-8 length, splitting the range
// until each piece's bytes vary independently.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  const int n = utf8_len(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  hf::append_utf8(a, lo);
  hf::append_utf8(b, hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t k = 0; k < a.size(); ++k)
    seq.emplace_back(static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k]));
  out.push_back(std::move(seq));
}

}  // namespace

CharSet CharSet::range(uint32_t lo, uint32_t hi) {
  CharSet s;
  s.add(lo, hi);
  return s;
}

CharSet CharSet::any() { return CharSet{}.complement(); }

void CharSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) return;
  ranges_.emplace_back(lo, std::min(hi, kMaxCodePoint));
  normalize();
}

void CharSet::add(const CharSet& other) {
  ranges_.insert(ranges_.end(), other.ranges_.begin(), other.ranges_.end());
  normalize();
}

void CharSet::normalize() {
  // Surrogates are never characters: cut them out, then sort and merge.
  std::vector<std::pair<uint32_t, uint32_t>> cut;
  for (auto [lo, hi] : ranges_) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      cut.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) cut.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) cut.emplace_back(kSurrogateHi + 1, hi);
  }
  std::sort(cut.begin(), cut.end());
  ranges_.clear();
  for (auto r : cut) {
    if (!ranges_.empty() && r.first <= ranges_.back().second + 1)
      ranges_.back().second = std::max(ranges_.back().second, r.second);
    else
      ranges_.push_back(r);
  }
}

CharSet CharSet::complement() const {
  CharSet out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges_) {
    if (lo > next) out.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.ranges_.emplace_back(next, kMaxCodePoint);
  out.normalize();
  return out;
}

CharSet CharSet::intersect(const CharSet& other) const {
  CharSet either = complement();
  either.add(other.complement());
  return either.complement();
}

bool CharSet::contains(uint32_t c) const {
  for (auto [lo, hi] : ranges_)
    if (c >= lo && c <= hi) return true;
  return false;
}

Sym char_set_rule(GrammarBuilder& b, const CharSet& set, CharContext context) {
  std::vector<Seq> alts;
  CharSet plain = set;
  if (context == CharContext::kJsonString) {
    CharSet special = CharSet::range(0, 0x1F);
    special.add('"', '"');
    special.add('\\', '\\');
    plain = set.intersect(special.complement());
    const CharSet escaped = set.intersect(special);
    for (auto [lo, hi] : escaped.ranges())
      for (uint32_t c = lo; c <= hi; ++c) {
        std::string esc;
        append_json_escape(esc, static_cast<unsigned char>(c));  // c < 0x20, '"' or '\\'
        alts.push_back(b.literal(esc));
      }
  }
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  for (auto [lo, hi] : plain.ranges()) {
    // Split at the UTF-8 length boundaries first.
    for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (lo <= edge && hi > edge) {
        utf8_sequences(lo, edge, seqs);
        lo = edge + 1;
      }
    }
    utf8_sequences(lo, hi, seqs);
  }
  // Sequences of one byte merge into one byte set.
  ByteSet singles;
  for (const auto& s : seqs) {
    if (s.size() == 1) {
      for (int c = s[0].first; c <= s[0].second; ++c) singles.set(c);
      continue;
    }
    Seq seq;
    for (auto [lo, hi] : s) seq.push_back(b.byte_range(lo, hi));
    alts.push_back(seq);
  }
  if (singles.any()) alts.push_back({b.bytes(singles)});
  return GrammarBuilder::rule(b.rule_of(alts));
}

}  // namespace flashserve::structured
