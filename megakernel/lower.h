// Lowering a model shape and batch size into a MegaProgram (megakernel/instructions.h): the
// stages of a decode step, each weight cut into row tiles so that every SM streams about the
// same bytes, dependency counters between stages, and which shapes the megakernel serves.
#pragma once

#include <string>

#include "megakernel/instructions.h"
#include "weights/loaded_model.h"

namespace flashserve {

// Why `c` cannot run on the megakernel ("" when it can): FP8/int4 weights, sliding windows,
// soft-caps, Gemma/Phi3/Granite/Olmo2-style features, RoPE scalings with an attention factor,
// tensor parallelism, a head_dim above 128 or not a multiple of 8, odd row lengths, query
// groups wider than the kernel's scratch (kernels/megakernel.h has the limits).
std::string megakernel_unsupported(const ModelConfig& c, int tensor_parallel_size);

// The program of a decode step of `batch` (1..kMegaMaxBatch) sequences on `num_sms` SMs.
// Stages, each waiting on the whole previous one: embed; per layer qkv, attention (batch x
// num_kv_heads x num_splits), o, gate/up, down; lm_head.
MegaProgram lower_decode_step(const ModelConfig& c, int batch, int num_sms);

}  // namespace flashserve
