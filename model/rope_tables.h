// RoPE as the forward pass applies it: the inverse-frequency table of every scaling type
// (weights/rope_config.h), partial rotary and NoPE layers, the attention factor that YaRN and
// LongRoPE put on cos and sin, and the row order that lines partial rotary up with the kernels'
// rotate-half pairing (i, i + head_dim/2).
#pragma once

#include <vector>

#include "weights/loaded_model.h"

namespace flashserve {

// Dims of a head that RoPE turns: head_dim * partial_rotary_factor (all of them by default).
int rotary_dim(const ModelConfig& config);

// Inverse frequency of kernel pair i (dims i and i + head_dim/2) after rotary_row_order: the
// scaled theta^(-2i/rotary_dim) for the first rotary_dim/2 pairs, 0 (cos 1, sin 0: not turned)
// for the rest. LongRoPE takes its long factors when the served context (max_model_len) is longer
// than the pretrained one, else the short ones (docs/MODELS.md: how transformers differs).
std::vector<float> rope_inv_freq(const ModelConfig& config);  // [head_dim / 2]

// The factor YaRN and LongRoPE multiply cos and sin by (1 for the other types): q·k of the
// rotated dims grows by its square.
double rope_attention_factor(const ModelConfig& config);

// Row r of a q or k head after reordering is row order[r] of the checkpoint's head: rotated pair
// (i, i + rotary_dim/2) lands on kernel pair (i, i + head_dim/2) and the unrotated dims fill the
// remaining pairs. The identity when rotary_dim == head_dim.
std::vector<int> rotary_row_order(int head_dim, int rotary_dim);  // [head_dim]

// Under partial rotary, the stacked q/k/v projection rows ([(q_heads + 2 kv_heads) head_dim]) as
// the kernels need them: each q and k head reordered by rotary_row_order, v as it is, and, when
// the attention factor is not 1, the rotated q rows times its square (the factor applies to the
// rotated dims only, so it cannot go into the softmax scale). Both left empty with every dim
// rotated. Refuses q/k norms, whose weights would need the same order.
void partial_rotary_rows(const ModelConfig& config, int q_heads, int kv_heads,
                         std::vector<int>* order,      // [(q_heads + 2 kv_heads) head_dim]
                         std::vector<float>* factor);  // [(q_heads + 2 kv_heads) head_dim] or empty

}  // namespace flashserve
