// Sliding-window KV memory: the window arithmetic and the release of blocks behind the window
// (see kv_window.h).
#include "scheduling/kv_window.h"

#include <algorithm>

#include "core/error.h"

namespace flashserve {

int shared_kv_window(std::span<const int> layer_windows) {
  if (layer_windows.empty()) return 0;
  int widest = 0;
  for (int w : layer_windows) {
    FS_CHECK(w >= 0, "layer window ", w, " < 0");
    if (w == 0) return 0;
    widest = std::max(widest, w);
  }
  return widest;
}

int blocks_before_window(int first_pos, int window, int block_size) {
  if (window <= 0) return 0;
  // Block i holds positions i*bs .. (i+1)*bs - 1; it is behind when (i+1)*bs <= first_pos - window + 1.
  return std::max(0, (first_pos - window + 1) / block_size);
}

int window_blocks(int span, int block_size) {
  return span <= 0 ? 0 : (span + 2 * block_size - 2) / block_size;
}

void drop_blocks_before_window(Sequence* seq, BlockAllocator* blocks, int window,
                               int block_size) {
  const int behind = std::min(blocks_before_window(seq->num_computed, window, block_size),
                              static_cast<int>(seq->block_table.size()));
  for (; seq->num_dropped_blocks < behind; ++seq->num_dropped_blocks) {
    BlockId& entry = seq->block_table[size_t(seq->num_dropped_blocks)];
    blocks->release(entry);
    entry = kDroppedBlock;
  }
}

}  // namespace flashserve
