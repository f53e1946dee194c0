// tokenizer.json BPE model (see hf_bpe.h).
#include "tokenizer/hf_bpe.h"

#include <atomic>
#include <cstdio>
#include <queue>

#include "tokenizer/hf_text.h"

namespace flashserve::hf {

namespace {

constexpr size_t kCacheEntries = 1 << 15;  // pieces per thread; the cache is cleared when full
constexpr size_t kCacheMaxPieceBytes = 256;  // longer pieces are rare and not worth keeping

std::atomic<uint64_t> g_next_serial{1};

struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

PieceCache& thread_cache(uint64_t owner) {
  thread_local PieceCache cache;
  if (cache.owner != owner) {
    cache.map.clear();
    cache.owner = owner;
  }
  return cache;
}

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

Bpe::Bpe(const json& m) : serial_(g_next_serial++) {
  const std::string c = "model BPE";
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(key) && !m[key].is_null() && !(m[key].is_string() && m[key] == ""))
      config_error(c + ": '" + key + "' is not supported (only null)");
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"] != 0.0 && m["dropout"] != 1.0)
    config_error(c + ": dropout is not supported");
  byte_fallback_ = field<bool>(m, "byte_fallback", false, c);
  fuse_unk_ = field<bool>(m, "fuse_unk", false, c);
  ignore_merges_ = field<bool>(m, "ignore_merges", false, c);

  const json& vocab = required(m, "vocab", c);
  if (!vocab.is_object()) config_error(c + ": 'vocab' is not an object");
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
      config_error(c + ": vocab id of '" + token + "' is not an integer in [0, 2^24)");
    vocab_.emplace(token, id.get<int32_t>());
    max_id = std::max(max_id, id.get<int32_t>());
  }
  id_to_token_.assign(size_t(max_id + 1), std::string());
  for (const auto& [token, id] : vocab_) id_to_token_[size_t(id)] = token;

  const std::string unk = field<std::string>(m, "unk_token", "", c);
  if (!unk.empty()) {
    auto it = vocab_.find(unk);
    if (it == vocab_.end()) config_error(c + ": unk_token '" + unk + "' is not in the vocabulary");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }

  const json& merges = required(m, "merges", c);
  if (!merges.is_array()) config_error(c + ": 'merges' is not a list");
  merges_.reserve(merges.size());
  int32_t rank = 0;
  for (const json& mj : merges) {
    std::string a, b;
    if (mj.is_string()) {  // "a b", the older form
      const std::string s = mj.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        config_error(c + ": merge \"" + s + "\" is not two tokens separated by one space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (mj.is_array() && mj.size() == 2 && mj[0].is_string() && mj[1].is_string()) {
      a = mj[0].get<std::string>(), b = mj[1].get<std::string>();
    } else {
      config_error(c + ": a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = vocab_.find(a), ib = vocab_.find(b), iab = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || iab == vocab_.end())
      config_error(c + ": merge '" + a + "' + '" + b + "' uses a token missing from the vocabulary");
    merges_.emplace(pair_key(ia->second, ib->second), Merge{rank++, iab->second});
  }
}

void Bpe::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > kCacheMaxPieceBytes) return merge_word(piece, out);
  PieceCache& cache = thread_cache(serial_);
  auto hit = cache.map.find(piece);
  if (hit != cache.map.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  const size_t start = out.size();
  merge_word(piece, out);
  if (cache.map.size() >= kCacheEntries) cache.map.clear();
  cache.map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + ptrdiff_t(start), out.end()));
}

void Bpe::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // indices into `syms`, -1 at the ends
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(piece.size());
  auto push = [&](int32_t id) {
    const int32_t i = int32_t(syms.size());
    syms.push_back({id, i - 1, -1, true});
    if (i > 0) syms[size_t(i - 1)].next = i;
  };
  bool last_was_unk = false;
  for_each_char(piece, [&](uint32_t, size_t at, size_t n) {
    auto it = vocab_.find(piece.substr(at, n));
    if (it != vocab_.end()) {
      push(it->second);
      last_was_unk = false;
      return;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t k = 0; k < n; ++k) all &= byte_ids_[static_cast<unsigned char>(piece[at + k])] >= 0;
      if (all) {
        for (size_t k = 0; k < n; ++k) push(byte_ids_[static_cast<unsigned char>(piece[at + k])]);
        last_was_unk = false;
        return;
      }
    }
    if (unk_id_ < 0) return;  // no unknown token: HF drops the character
    if (!(fuse_unk_ && last_was_unk)) push(unk_id_);
    last_was_unk = true;
  });

  // Candidate merges ordered by (rank, position); stale entries are skipped when popped.
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[size_t(left)].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(syms[size_t(left)].id, syms[size_t(right)].id));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < int32_t(syms.size()); ++i) consider(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = syms[size_t(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[size_t(left.next)];
    auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id || it->second.rank != top.rank)
      continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[size_t(right.next)].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (const Symbol& s : syms)
    if (s.alive) out.push_back(s.id);
}

}  // namespace flashserve::hf
