// StepPlan::lay_out: the chunks of a step flattened into the per-token and per-sequence arrays
// the forward pass reads (see model/step.h).
#include "model/step.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve {

void StepPlan::lay_out(int bs, int num_blocks, int vocab) {
  num_seqs = int(chunks.size());
  max_q_len = max_kv_len = max_blocks_per_seq = 0;
  tokens.clear();
  positions.clear();
  slot_mapping.clear();
  cu_q_lens.assign(1, 0);
  kv_lens.clear();
  logit_rows.clear();
  row_chunk.clear();
  num_hidden_rows = 0;
  for (int b = 0; b < num_seqs; ++b) {
    const StepChunk& ch = chunks[size_t(b)];
    FS_CHECK(ch.num_tokens > 0 && ch.tokens != nullptr, "chunk ", b, " has no tokens");
    FS_CHECK(ch.num_cached >= 0, "chunk ", b, ": num_cached ", ch.num_cached);
    FS_CHECK(ch.block_table != nullptr, "chunk ", b, " has no block table");
    const int kv_len = ch.num_cached + ch.num_tokens;
    const int needed = (kv_len + bs - 1) / bs;
    FS_CHECK(int(ch.block_table->size()) >= needed, "chunk ", b, ": ", kv_len, " tokens need ",
             needed, " blocks, table has ", ch.block_table->size());
    for (int i = 0; i < needed; ++i) {
      const int32_t blk = (*ch.block_table)[size_t(i)];
      FS_CHECK(blk >= 0 && blk < num_blocks, "chunk ", b, ": block id ", blk,
               " outside the cache's ", num_blocks, " blocks");
    }
    const int row0 = int(tokens.size());
    for (int i = 0; i < ch.num_tokens; ++i) {
      const int32_t tok = ch.tokens[i];
      FS_CHECK(tok >= 0 && tok < vocab, "chunk ", b, ": token id ", tok, " outside vocab ", vocab);
      const int pos = ch.num_cached + i;
      tokens.push_back(tok);
      positions.push_back(pos);
      slot_mapping.push_back((*ch.block_table)[size_t(pos / bs)] * bs + pos % bs);
    }
    const bool drawn_here = ch.sample_path != SamplePath::kHost;
    FS_CHECK(!drawn_here || ch.logits == LogitsWanted::kLast, "chunk ", b,
             ": sampling needs LogitsWanted::kLast");
    FS_CHECK(ch.sample_path != SamplePath::kDevice || ch.sample.params, "chunk ", b,
             ": sampling without parameters");
    const int rows = ch.logits == LogitsWanted::kAll ? ch.num_tokens
                     : ch.logits == LogitsWanted::kNone ? 0 : 1;
    if (ch.logits == LogitsWanted::kHidden) ++num_hidden_rows;
    for (int i = ch.num_tokens - rows; i < ch.num_tokens; ++i) {
      logit_rows.push_back(row0 + i);
      row_chunk.push_back(b);
    }
    cu_q_lens.push_back(int32_t(tokens.size()));
    kv_lens.push_back(kv_len);
    max_q_len = std::max(max_q_len, ch.num_tokens);
    max_kv_len = std::max(max_kv_len, kv_len);
    max_blocks_per_seq = std::max(max_blocks_per_seq, needed);
  }
  block_table.assign(size_t(num_seqs) * size_t(max_blocks_per_seq), -1);
  for (int b = 0; b < num_seqs; ++b) {
    const std::vector<int32_t>& t = *chunks[size_t(b)].block_table;
    const int needed = (kv_lens[size_t(b)] + bs - 1) / bs;
    std::copy(t.begin(), t.begin() + needed,
              block_table.begin() + ptrdiff_t(size_t(b) * size_t(max_blocks_per_seq)));
  }
}

}  // namespace flashserve
