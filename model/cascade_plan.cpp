// CascadePlan: groups of a decode step's sequences that share leading blocks, and the cascade
// attention arrays for them (see model/cascade_plan.h).
#include "model/cascade_plan.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace flashserve {

void CascadePlan::clear() {
  groups.clear();
  num_parts = num_prefix_rows = part_stride = suffix_stride = merge_stride = 0;
  for (auto* v : {&part_cu_rows, &part_kv_lens, &part_block_table, &prefix_q_rows,
                  &suffix_kv_lens, &suffix_block_table, &merge_rows})
    v->clear();
}

void CascadePlan::build(const StepPlan& s, int bs, const CascadeConfig& cfg) {
  clear();
  FS_CHECK(bs > 0 && cfg.part_blocks > 0 && cfg.row_multiple > 0 && cfg.min_group_size >= 2 &&
               (!cfg.enabled || cfg.kv_bytes_per_token > 0),
           "cascade: bad config");
  const bool pure_decode = s.max_q_len == 1 && int(s.tokens.size()) == s.num_seqs;
  if (!cfg.enabled || !pure_decode || s.num_seqs < cfg.min_group_size) return;
  find_groups(s, bs, cfg);
  if (!groups.empty()) fill_arrays(s, bs, cfg);
}

uint64_t CascadePlan::shape_key() const {
  if (!active()) return 0;
  return uint64_t(num_parts) | uint64_t(num_prefix_rows) << 16 | uint64_t(merge_stride) << 40 |
         uint64_t(part_stride) << 48;
}

void CascadePlan::find_groups(const StepPlan& s, int bs, const CascadeConfig& cfg) {
  // A sequence may share the full blocks before the one holding its last key (kv_len - 1),
  // which this step writes; padding sequences (kv_len 0) share nothing.
  shareable_.assign(size_t(s.num_seqs), 0);
  std::map<int32_t, std::vector<int>> by_first;  // ordered: the same step gives the same plan
  for (int b = 0; b < s.num_seqs; ++b) {
    const int kv = s.kv_lens[size_t(b)];
    shareable_[size_t(b)] = kv > 0 ? (kv - 1) / bs : 0;
    if (shareable_[size_t(b)] > 0)
      by_first[s.block_table[size_t(b) * size_t(s.max_blocks_per_seq)]].push_back(b);
  }
  for (auto& [first, bucket] : by_first) split(s, bs, cfg, std::move(bucket), 0);
}

// Every member of `bucket` holds the same blocks [0, depth).
void CascadePlan::split(const StepPlan& s, int bs, const CascadeConfig& cfg,
                        std::vector<int> bucket, int depth) {
  if (int(bucket.size()) < cfg.min_group_size) return;
  const auto block = [&](int b, int i) {
    return s.block_table[size_t(b) * size_t(s.max_blocks_per_seq) + size_t(i)];
  };
  int limit = shareable_[size_t(bucket[0])];
  for (int b : bucket) limit = std::min(limit, shareable_[size_t(b)]);
  int p = depth;
  while (p < limit && std::all_of(bucket.begin(), bucket.end(),
                                  [&](int b) { return block(b, p) == block(bucket[0], p); }))
    ++p;
  const int64_t saved = int64_t(bucket.size() - 1) * p * bs * cfg.kv_bytes_per_token;
  if (p > 0 && saved >= cfg.min_saved_bytes) {
    groups.push_back({std::move(bucket), p});
    return;
  }
  // Too short to pay for all of them: those that go on together past block p may still pay.
  std::map<int32_t, std::vector<int>> by_next;
  for (int b : bucket)
    if (shareable_[size_t(b)] > p) by_next[block(b, p)].push_back(b);
  for (auto& [next, sub] : by_next) split(s, bs, cfg, std::move(sub), p + 1);
}

void CascadePlan::fill_arrays(const StepPlan& s, int bs, const CascadeConfig& cfg) {
  const int n = s.num_seqs, stride = s.max_blocks_per_seq, pb = cfg.part_blocks;
  const auto table = [&](int b) { return s.block_table.begin() + ptrdiff_t(size_t(b) * size_t(stride)); };
  part_stride = pb;
  suffix_stride = stride;
  for (const Group& g : groups) merge_stride = std::max(merge_stride, (g.shared_blocks + pb - 1) / pb);
  merge_rows.assign(size_t(n) * size_t(merge_stride), -1);
  std::vector<int> shared(size_t(n), 0);
  part_cu_rows.assign(1, 0);
  for (const Group& g : groups) {
    const int members = int(g.members.size());
    const int rows = (members + cfg.row_multiple - 1) / cfg.row_multiple * cfg.row_multiple;
    for (int b : g.members) shared[size_t(b)] = g.shared_blocks;
    for (int first = 0, part = 0; first < g.shared_blocks; first += pb, ++part) {
      const int blocks = std::min(pb, g.shared_blocks - first);
      for (int r = 0; r < rows; ++r) prefix_q_rows.push_back(g.members[size_t(r < members ? r : 0)]);
      for (int m = 0; m < members; ++m)
        merge_rows[size_t(g.members[size_t(m)]) * size_t(merge_stride) + size_t(part)] =
            num_prefix_rows + m;
      num_prefix_rows += rows;
      part_cu_rows.push_back(num_prefix_rows);
      part_kv_lens.push_back(blocks * bs);
      const auto from = table(g.members[0]) + first;
      part_block_table.insert(part_block_table.end(), from, from + blocks);
      part_block_table.resize(part_block_table.size() + size_t(pb - blocks), -1);
      ++num_parts;
    }
  }
  suffix_kv_lens.resize(size_t(n));
  suffix_block_table.assign(size_t(n) * size_t(stride), -1);
  for (int b = 0; b < n; ++b) {
    const int kv = s.kv_lens[size_t(b)], skip = shared[size_t(b)];
    suffix_kv_lens[size_t(b)] = kv - skip * bs;
    const int own = (kv + bs - 1) / bs - skip;
    std::copy_n(table(b) + skip, own, suffix_block_table.begin() + ptrdiff_t(size_t(b) * size_t(stride)));
  }
  FS_CHECK(num_parts < (1 << 16) && num_prefix_rows < (1 << 24) && merge_stride < (1 << 8) &&
               part_stride < (1 << 16),
           "cascade plan out of the graph key's range");
}

}  // namespace flashserve
