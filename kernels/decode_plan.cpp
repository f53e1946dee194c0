// Split-K decode planning: wave-efficiency heuristic of docs/KERNEL_NOTES.md §3.3 with a fixed chunk length
// shared by every sequence, so ragged batches are balanced by giving long sequences more splits.
#include "kernels/decode_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace flashserve {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Chunks are whole KV blocks and whole kernel tiles.
int chunk_granule(int block_size, int tile_len) {
  return int(std::lcm<int64_t>(block_size, tile_len));
}

int round_up_chunk(int64_t len, int granule) {
  return int(ceil_div(std::max<int64_t>(len, 1), granule) * granule);
}

}  // namespace

DecodePlan plan_decode_fixed(int max_kv_len, int num_splits, int block_size, int tile_len) {
  FS_CHECK(num_splits >= 1 && block_size > 0 && tile_len > 0 && max_kv_len >= 0,
           "bad fixed plan: num_splits ", num_splits, " block_size ", block_size);
  const int granule = chunk_granule(block_size, tile_len);
  DecodePlan plan;
  plan.num_splits = num_splits;
  plan.chunk_len = round_up_chunk(ceil_div(std::max(max_kv_len, 1), num_splits), granule);
  return plan;
}

DecodePlan plan_decode(const int32_t* kv_lens, int num_seqs, int num_kv_heads, int block_size,
                       const DecodePlanConfig& c, int window) {
  FS_CHECK(num_seqs >= 0 && num_kv_heads > 0 && block_size > 0, "bad decode batch: num_seqs ",
           num_seqs, " num_kv_heads ", num_kv_heads, " block_size ", block_size);
  FS_CHECK(c.num_sms > 0 && c.ctas_per_sm > 0 && c.max_splits >= 1 && c.min_chunk_len > 0,
           "bad DecodePlanConfig");
  FS_CHECK(window >= 0, "negative window ", window);
  const int granule = chunk_granule(block_size, c.tile_len);
  // Each sequence's keys to split: its decode_span (all of kv_len without a window).
  std::vector<int> spans(static_cast<size_t>(num_seqs));
  int max_len = 0;
  for (int b = 0; b < num_seqs; ++b) {
    FS_CHECK(kv_lens[b] >= 0, "negative kv_len in sequence ", b);
    spans[b] = decode_span(kv_lens[b], window);
    max_len = std::max(max_len, spans[b]);
  }
  DecodePlan plan;
  plan.chunk_len = round_up_chunk(max_len, granule);

  const double slots = double(c.num_sms) * c.ctas_per_sm;
  const int64_t unsplit = int64_t(num_seqs) * num_kv_heads;
  if (unsplit >= c.fill_fraction * slots || max_len <= c.min_chunk_len) return plan;

  // Candidate s: chunk = ceil(max_len / s) rounded to the granule, never below min_chunk_len.
  // Thread blocks = num_kv_heads * sum_b ceil(L_b / chunk); wave efficiency w / ceil(w).
  const int64_t min_chunk = round_up_chunk(c.min_chunk_len, granule);
  const int s_cap = int(std::min<int64_t>(c.max_splits, ceil_div(max_len, min_chunk)));
  struct Candidate {
    int splits, chunk;
    double eff;
  };
  Candidate best{1, plan.chunk_len, 0.0};
  std::vector<Candidate> candidates;
  int last_chunk = -1;
  for (int s = 1; s <= s_cap; ++s) {
    const int chunk = round_up_chunk(ceil_div(max_len, s), granule);
    if (chunk < min_chunk || chunk == last_chunk) continue;  // same split as a smaller s
    last_chunk = chunk;
    int64_t ctas = 0;
    for (int b = 0; b < num_seqs; ++b) ctas += std::max<int64_t>(1, ceil_div(spans[b], chunk));
    ctas *= num_kv_heads;
    const double waves = double(ctas) / slots;
    const double eff = waves / std::ceil(waves);
    const int splits = int(ceil_div(max_len, chunk));
    candidates.push_back({splits, chunk, eff});
    if (eff > best.eff) best = candidates.back();
  }
  for (const Candidate& cand : candidates) {  // ascending s: the fewest splits that is close enough
    if (cand.eff >= c.eff_fraction * best.eff) {
      plan.num_splits = cand.splits;
      plan.chunk_len = cand.chunk;
      break;
    }
  }
  return plan;
}

}  // namespace flashserve
