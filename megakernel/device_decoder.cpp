// MegaDecoder: programs, counters and activation buffers on the device, and the launch.
#include "megakernel/device_decoder.h"

#include "core/error.h"

namespace flashserve {

MegaDecoder::MegaDecoder(Backend& backend, const ModelConfig& c) : backend_(backend), config_(c) {
  const std::string why = megakernel_unsupported(c, 1);
  FS_CHECK(why.empty(), "megakernel: ", why);
  FS_CHECK(backend.device() == Device::kCuda && backend.compute_dtype() == DType::kBF16,
           "megakernel: needs the CUDA backend with bf16 compute");
#ifdef FLASHSERVE_HAS_CUDA
  num_sms_ = cuda::megakernel_sm_count();
#else
  FS_THROW("megakernel: this build has no CUDA");
#endif
  const int64_t B = kMegaMaxBatch, hd = c.head_dim, hq = c.num_q_heads, hkv = c.num_kv_heads;
  x_ = backend.allocate(DType::kF32, {B * c.hidden_size});
  qkv_ = backend.allocate(DType::kF32, {B * (hq + 2 * hkv) * hd});
  partial_ = backend.allocate(DType::kF32, {B * hq * kMegaMaxSplits * (hd + 1)});
  attn_ = backend.allocate(DType::kF32, {B * hq * hd});
  act_ = backend.allocate(DType::kF32, {B * c.intermediate_size});
  base_.x = x_.tensor.as<float>();
  base_.qkv = qkv_.tensor.as<float>();
  base_.partial = partial_.tensor.as<float>();
  base_.attn = attn_.tensor.as<float>();
  base_.act = act_.tensor.as<float>();
  base_.num_sms = num_sms_;
}

void MegaDecoder::bind(const std::vector<MegaLayerPtrs>& layers, const uint16_t* embed,
                       const uint16_t* final_norm, const uint16_t* lm_head,
                       const float* inv_freq) {
  FS_CHECK(int(layers.size()) == config_.num_layers, "megakernel: ", layers.size(), " layers");
  const int64_t words = int64_t(layers.size() * sizeof(MegaLayerPtrs) / sizeof(int32_t));
  layers_ = backend_.allocate(DType::kI32, {words});
  backend_.copy_from_host(layers_.tensor, layers.data());
  base_.layers = static_cast<const MegaLayerPtrs*>(layers_.tensor.data);
  base_.embed = embed, base_.final_norm = final_norm, base_.lm_head = lm_head;
  base_.inv_freq = inv_freq;
  bound_ = true;
}

const MegaDecoder::DeviceProgram& MegaDecoder::program(int batch) {
  auto it = programs_.find(batch);
  if (it != programs_.end()) return it->second;
  DeviceProgram dp;
  dp.program = lower_decode_step(config_, batch, num_sms_);
  std::vector<MegaInstr> instrs;
  std::vector<int32_t> starts;
  dp.program.flatten(&instrs, &starts);
  static_assert(sizeof(MegaInstr) % sizeof(int32_t) == 0, "MegaInstr is whole int32 words");
  dp.instrs = backend_.allocate(
      DType::kI32, {int64_t(instrs.size() * sizeof(MegaInstr) / sizeof(int32_t))});
  backend_.copy_from_host(dp.instrs.tensor, instrs.data());
  dp.queue_start = backend_.allocate(DType::kI32, {int64_t(starts.size())});
  backend_.copy_from_host(dp.queue_start.tensor, starts.data());
  // Counters start at zero; each launch leaves them at zero (its last CTA resets them).
  const int64_t need = dp.program.num_counters + 1;
  if (need > counters_size_) {
    counters_ = backend_.allocate(DType::kI32, {need});
    const std::vector<int32_t> zeros(size_t(need), 0);
    backend_.copy_from_host(counters_.tensor, zeros.data());
    counters_size_ = need;
  }
  return programs_.emplace(batch, std::move(dp)).first->second;
}

void MegaDecoder::run(int batch, const MegaStepArrays& step) {
  FS_CHECK(bound_, "megakernel: run before bind");
  const DeviceProgram& dp = program(batch);
  MegaKernelArgs a = base_;
  a.dims = dp.program.dims;
  a.instrs = static_cast<const MegaInstr*>(dp.instrs.tensor.data);
  a.queue_start = dp.queue_start.tensor.as<int32_t>();
  a.counters = counters_.tensor.as<int32_t>();
  a.num_counters = dp.program.num_counters;  // "done" is the next one
  a.tokens = step.tokens, a.positions = step.positions, a.slots = step.slots;
  a.kv_lens = step.kv_lens, a.block_table = step.block_table;
  a.max_blocks_per_seq = step.max_blocks_per_seq, a.block_size = step.block_size;
  a.logits = step.logits;
  a.trace = trace_;
#ifdef FLASHSERVE_HAS_CUDA
  cuda::launch_megakernel(a, backend_.native_stream());
#endif
}

}  // namespace flashserve
