// Packs SampleRequests for the GPU sampler (see sampling/sample_pack.h).
#include "sampling/sample_pack.h"

#include <cmath>

#include "core/error.h"

namespace flashserve {
namespace {

// 2^(62 - ceil(log2(vocab))): a probability of 1 for every token still sums below 2^62.
double mass_scale(int vocab) {
  int bits = 0;
  while ((int64_t(1) << bits) < vocab) ++bits;
  return std::ldexp(1.0, 62 - bits);
}

}  // namespace

TokenEdit& SamplePacker::edit_of(int32_t token) {
  int32_t& slot = slot_[size_t(token)];
  if (slot < 0) {
    slot = int32_t(pack_.edits.size());
    pack_.edits.push_back(TokenEdit{token, 0, 0, 0, 0});
  }
  return pack_.edits[size_t(slot)];
}

const SamplePack& SamplePacker::pack(std::span<const int64_t> logits_rows,
                                     std::span<const SampleRequest> requests, int vocab) {
  FS_CHECK(logits_rows.size() == requests.size(), "pack_samples: ", logits_rows.size(),
           " rows for ", requests.size(), " requests");
  FS_CHECK(vocab > 0, "pack_samples: empty vocabulary");
  pack_.rows.clear();
  pack_.edits.clear();
  pack_.biases.clear();
  pack_.masks.clear();
  slot_.assign(size_t(vocab), -1);
  for (size_t r = 0; r < requests.size(); ++r) {
    const SampleRequest& q = requests[r];
    FS_CHECK(q.params != nullptr, "pack_samples: request ", r, " has no parameters");
    const SamplingParams& p = *q.params;
    validate_sampling(p, vocab);
    SampleRowArgs a{.logits_row = logits_rows[r], .seed = p.seed, .step = q.step,
                    .inv_temperature = p.temperature > 0.f ? 1.0 / double(p.temperature) : 0.0,
                    .mass_scale = mass_scale(vocab), .temperature = p.temperature, .top_p = p.top_p,
                    .min_p = p.min_p, .top_k = p.top_k, .repetition_penalty = p.repetition_penalty,
                    .presence_penalty = p.presence_penalty, .frequency_penalty = p.frequency_penalty,
                    .edits_begin = int32_t(pack_.edits.size())};  // edits_end: once the edits are in

    // Biases first: count them per token, give each token a contiguous range, then fill the
    // ranges in request order (bias_end doubles as the fill cursor).
    for (const auto& [token, bias] : p.logit_bias) edit_of(token).bias_end++;
    for (int32_t e = a.edits_begin; e < int32_t(pack_.edits.size()); ++e) {
      TokenEdit& t = pack_.edits[size_t(e)];
      const int32_t n = t.bias_end;
      t.bias_begin = t.bias_end = int32_t(pack_.biases.size());
      pack_.biases.resize(pack_.biases.size() + size_t(n));
    }
    for (const auto& [token, bias] : p.logit_bias)
      pack_.biases[size_t(edit_of(token).bias_end++)] = bias;
    auto check_id = [&](int32_t t) {
      FS_CHECK(t >= 0 && t < vocab, "token id ", t, " outside vocab");
    };
    if (p.repetition_penalty != 1.f) {
      for (int32_t t : q.prompt) check_id(t), edit_of(t).seen = 1;
      for (int32_t t : q.generated) check_id(t), edit_of(t).seen = 1;
    }
    if (p.presence_penalty != 0.f || p.frequency_penalty != 0.f)
      for (int32_t t : q.generated) check_id(t), edit_of(t).count++;
    a.edits_end = int32_t(pack_.edits.size());
    if (q.allowed != nullptr) {
      a.mask_offset = int64_t(pack_.masks.size());
      pack_.masks.insert(pack_.masks.end(), q.allowed, q.allowed + mask_words(vocab));
    }
    for (int32_t e = a.edits_begin; e < a.edits_end; ++e)  // ready for the next row
      slot_[size_t(pack_.edits[size_t(e)].token)] = -1;
    pack_.rows.push_back(a);
  }
  return pack_;
}

SamplePack pack_samples(std::span<const int64_t> logits_rows,
                        std::span<const SampleRequest> requests, int vocab) {
  SamplePacker packer;
  return packer.pack(logits_rows, requests, vocab);
}

void apply_packed_edits(std::span<float> logits, const SamplePack& pack, size_t r) {
  const SampleRowArgs& a = pack.rows.at(r);
  if (a.mask_offset >= 0) apply_token_mask(logits, pack.masks.data() + a.mask_offset);
  for (int32_t e = a.edits_begin; e < a.edits_end; ++e) {
    const TokenEdit& t = pack.edits[size_t(e)];
    float& v = logits[size_t(t.token)];
    for (int32_t j = t.bias_begin; j < t.bias_end; ++j) v += pack.biases[size_t(j)];
    if (a.repetition_penalty != 1.f && t.seen)
      v = v > 0.f ? v / a.repetition_penalty : v * a.repetition_penalty;
    if ((a.presence_penalty != 0.f || a.frequency_penalty != 0.f) && t.count > 0)
      v -= a.frequency_penalty * float(t.count) + a.presence_penalty;
  }
}

}  // namespace flashserve
