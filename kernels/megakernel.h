// The decode megakernel's contract: the instruction set a lowered decode step is made of
// (megakernel/lower.h writes it, kernels/cuda/megakernel.cu and megakernel/interpreter.cpp run
// it), the buffers instructions read and write, and the launcher of the persistent kernel.
// Plain structs, C++17-clean (included by .cu files). docs/MEGAKERNEL.md has the design.
#pragma once

#include <cstdint>

namespace flashserve {

// What an instruction does. Every op but kEmbed and kAttention streams rows [begin, end) of one
// weight matrix (kGateUp: gate rows [begin, end) and the matching up rows).
enum class MegaOp : int32_t {
  kEmbed = 0,      // x[b] = embed[token[b]] for sequences b in [begin, end)
  kQkv = 1,        // qkv[b, r] = rms_norm(x[b], input_norm) · Wqkv[r] (+ bqkv[r]), r in the tile
  kAttention = 2,  // one (sequence, kv head, split): q/k norm, RoPE, KV write, partial softmax
  kOProj = 3,      // x[b, r] += attn[b] · Wo[r]
  kGateUp = 4,     // act[b, j] = silu(h · Wg[j]) * (h · Wu[j]), h = rms_norm(x[b], post_norm)
  kDown = 5,       // x[b, r] += act[b] · Wd[r]
  kLmHead = 6,     // logits[b, r] = rms_norm(x[b], final_norm) · Wlm[r]
};
constexpr int kMegaNumOps = 7;

// Limits the kernel's shared memory is sized by (megakernel/lower.h keeps programs within them).
constexpr int kMegaMaxTileRows = 512;  // weight rows a tile holds (kGateUp: gate + up rows)
constexpr int kMegaMaxBatch = 8;
constexpr int kMegaMaxSplits = 16;      // attention splits per (sequence, kv head)
constexpr int kMegaKeysPerSplit = 64;   // fewest keys worth a split of their own

// The splits of a program's num_splits that hold keys at kv_len: at least kMegaKeysPerSplit
// keys each (short sequences merge fewer partials); the others only arrive.
inline constexpr int mega_active_splits(int num_splits, int kv_len) {
  const int want = (kv_len + kMegaKeysPerSplit - 1) / kMegaKeysPerSplit;
  return want < 1 ? 1 : want < num_splits ? want : num_splits;
}
constexpr int kMegaMaxGroupDims = 2048;  // (num_q_heads / num_kv_heads) * head_dim
constexpr int kMegaMaxHeadDim = 128;

// The step's activation buffers (f32, device or host memory): which one an instruction reads
// and writes (documentation and checks; the op fixes the pairing).
enum class MegaBuf : int32_t {
  kNone = -1,
  kX = 0,       // [batch, hidden_size] the residual stream
  kQkv = 1,     // [batch, (num_q_heads + 2 num_kv_heads) head_dim] raw projections
  kPartial = 2,  // [batch, num_q_heads, num_splits, head_dim + 1] split outputs and their LSE
  kAttn = 3,    // [batch, num_q_heads * head_dim] merged attention
  kAct = 4,     // [batch, intermediate_size] silu(gate) * up
  kLogits = 5,  // [batch, vocab_size]
};

// One instruction. Waits until counter `wait_counter` holds at least `wait_count` (none when
// -1), runs, then adds 1 to `bump_counter`. kAttention adds 1 to `arrive_counter` first; the
// split that brings it to `arrive_count` merges the group's splits and alone bumps.
struct MegaInstr {
  int32_t op = 0;     // MegaOp
  int32_t layer = 0;  // 0..num_layers-1 (kEmbed, kLmHead: 0)
  int32_t begin = 0, end = 0;  // weight rows; kEmbed: sequences; kAttention: unused
  int32_t seq = 0, kv_head = 0, split = 0;  // kAttention only
  int32_t in_buf = -1, out_buf = -1;        // MegaBuf
  int32_t wait_counter = -1, wait_count = 0;
  int32_t bump_counter = -1;
  int32_t arrive_counter = -1, arrive_count = 0;  // kAttention only
};

// The shape the program was lowered for, as the kernel needs it.
struct MegaDims {
  int32_t num_layers = 0, hidden = 0, intermediate = 0, vocab = 0;
  int32_t num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  int32_t batch = 0, num_splits = 1;
  int32_t qk_norm = 0, qkv_bias = 0;
  float eps = 1e-5f, attention_scale = 1.f;
};

// One layer's weights on the device: bf16 matrices and norms (row-major, HF shapes) and its
// paged KV cache, bf16 [num_blocks, block_size, num_kv_heads, head_dim].
struct MegaLayerPtrs {
  const uint16_t* input_norm;  // [hidden_size]
  const uint16_t* wqkv;        // [(hq + 2 hkv) head_dim, hidden_size]
  const uint16_t* bqkv;        // [(hq + 2 hkv) head_dim] or null
  const uint16_t* q_norm;      // [head_dim] or null
  const uint16_t* k_norm;      // [head_dim] or null
  const uint16_t* wo;          // [hidden_size, hq head_dim]
  const uint16_t* post_norm;   // [hidden_size]
  const uint16_t* w_gate_up;   // [2 intermediate_size, hidden_size]: gate rows, then up rows
  const uint16_t* w_down;      // [hidden_size, intermediate_size]
  uint16_t* k_cache;           // [num_blocks, block_size, hkv, head_dim]
  uint16_t* v_cache;           // [num_blocks, block_size, hkv, head_dim]
};

// Everything one launch reads and writes (device pointers).
struct MegaKernelArgs {
  MegaDims dims;
  const MegaInstr* instrs;    // [num_instrs] every SM's queue, back to back
  const int32_t* queue_start;  // [num_sms + 1] SM s runs instrs[queue_start[s] .. [s + 1])
  int32_t num_sms = 0;
  int32_t* counters;          // [num_counters + 1] zero between launches; the last is "done"
  int32_t num_counters = 0;
  const MegaLayerPtrs* layers;  // [num_layers]
  const uint16_t* embed;       // [vocab_size, hidden_size] bf16
  const uint16_t* final_norm;  // [hidden_size] bf16
  const uint16_t* lm_head;     // [vocab_size, hidden_size] bf16 (the embedding when tied)
  const float* inv_freq;       // [head_dim / 2]
  const int32_t* tokens;       // [batch]
  const int32_t* positions;    // [batch]
  const int32_t* slots;        // [batch] block * block_size + offset, -1: write nowhere
  const int32_t* kv_lens;      // [batch] keys including this step's
  const int32_t* block_table;  // [batch, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0, block_size = 0;
  float* x;        // [batch, hidden_size]
  float* qkv;      // [batch, (hq + 2 hkv) head_dim]
  float* partial;  // [batch, hq, num_splits, head_dim + 1]
  float* attn;     // [batch, hq head_dim]
  float* act;      // [batch, intermediate_size]
  float* logits;   // [batch, vocab_size]
  // Null, or where thread 0 of each CTA records, per instruction i (the flattened order):
  // [i][0] cycles waiting on its dependency, [1] cycles running, [2] of those waiting for weight
  // pages, [3] %globaltimer (ns) when it started waiting (bench_megakernel_timeline reads it).
  int64_t* trace = nullptr;  // [num_instrs, kMegaTraceFields]
};
constexpr int kMegaTraceFields = 4;

namespace cuda {
// Runs one decode step: one CTA per SM (a cooperative launch), each walking its queue.
// `stream` is a cudaStream_t. Throws flashserve::Error on a launch failure.
void launch_megakernel(const MegaKernelArgs& args, void* stream);
// Multiprocessors of the current device (the SM count to lower for).
int megakernel_sm_count();
}  // namespace cuda

}  // namespace flashserve
