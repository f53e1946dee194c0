// Sliding-window KV memory: when every layer of a model attends only to the last `window`
// positions, the blocks of a sequence that lie wholly before the window of the next position it
// computes are never read again. These helpers say which blocks those are, how many blocks a
// windowed sequence holds at most, and release them (the scheduler calls them; see scheduler.h).
#pragma once

#include <span>

#include "scheduling/block_allocator.h"
#include "scheduling/sequence.h"

namespace flashserve {

// The block-table entry of a block released under the window. It is a valid block index (graph
// replays and the step plan's bounds check read every entry), but no layer reads it: every
// position it stands for lies before the window of every query the sequence still computes.
// Sequence::num_dropped_blocks says how many leading entries are this sentinel, so block 0 held
// for real elsewhere in the same table is never confused with it.
inline constexpr BlockId kDroppedBlock = 0;

// The window the scheduler may free KV memory by: the largest of the layers' windows when every
// layer has one, else 0 (some layer reads the whole context, so every block stays; one block
// table serves all layers). `layer_windows`: per layer, 0 = full attention; empty = all full.
int shared_kv_window(std::span<const int> layer_windows);

// Leading blocks that hold only positions before `first_pos - window + 1`: a query at first_pos
// or later never reads them. 0 when window is 0 (full attention).
int blocks_before_window(int first_pos, int window, int block_size);

// The most blocks that `span` consecutive positions can touch (the window of one query: its
// first position may sit at the end of a block). A windowed sequence holds at most
// window_blocks(window, block_size) blocks while it decodes.
int window_blocks(int span, int block_size);

// Releases seq's held blocks that lie before the window of its next position (num_computed) and
// puts kDroppedBlock in their table entries. Published blocks go to the prefix cache's
// evictable pool like any released block. No-op when window is 0.
void drop_blocks_before_window(Sequence* seq, BlockAllocator* blocks, int window, int block_size);

}  // namespace flashserve
