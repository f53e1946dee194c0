// UniformPagedBatch: the paged-KV layout the attention benchmarks time, on the device: num_seqs
// sequences of q_len new and kv_len cached tokens each, whose blocks are a shuffled permutation
// of the pool (scattered as in serving, never contiguous), and the PagedAttentionArgs over it.
// Header-only, C++17 (included by .cu benchmarks).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/paged_attention.h"

namespace flashserve::bench {

class UniformPagedBatch {
 public:
  // The block table is a permutation of the pool drawn from `rng`.
  UniformPagedBatch(int num_seqs, int q_len, int kv_len, int block_size, std::mt19937& rng)
      : num_seqs_(num_seqs), block_size_(block_size), blocks_per_seq_((kv_len + block_size - 1) / block_size),
        kv_lens_(num_seqs, kv_len) {
    std::vector<int32_t> cu(num_seqs + 1), table(static_cast<size_t>(num_blocks()));
    for (int b = 0; b <= num_seqs; ++b) cu[b] = b * q_len;
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    cu_q_lens_ = upload(cu);
    dev_kv_lens_ = upload(kv_lens_);
    block_table_ = upload(table);
  }
  ~UniformPagedBatch() {
    for (int32_t* p : {cu_q_lens_, dev_kv_lens_, block_table_}) cudaFree(p);
  }
  UniformPagedBatch(const UniformPagedBatch&) = delete;
  UniformPagedBatch& operator=(const UniformPagedBatch&) = delete;

  int blocks_per_seq() const { return blocks_per_seq_; }
  int num_blocks() const { return num_seqs_ * blocks_per_seq_; }
  const std::vector<int32_t>& kv_lens() const { return kv_lens_; }  // host copy [num_seqs]

  // The attention arguments over this batch; softmax scale 1 / sqrt(head_dim).
  PagedAttentionArgs args(int num_q_heads, int num_kv_heads, int head_dim, bool causal) const {
    PagedAttentionArgs a;
    a.num_seqs = num_seqs_;
    a.cu_q_lens = cu_q_lens_, a.kv_lens = dev_kv_lens_, a.block_table = block_table_;
    a.max_blocks_per_seq = blocks_per_seq_, a.block_size = block_size_;
    a.num_q_heads = num_q_heads, a.num_kv_heads = num_kv_heads, a.head_dim = head_dim;
    a.scale = 1.f / std::sqrt(float(head_dim));
    a.causal = causal;
    return a;
  }

 private:
  static int32_t* upload(const std::vector<int32_t>& host) {
    int32_t* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(host.size(), 1) * sizeof(int32_t)));
    CUDA_CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    return p;
  }

  int num_seqs_, block_size_, blocks_per_seq_;
  std::vector<int32_t> kv_lens_;
  int32_t* cu_q_lens_ = nullptr;
  int32_t* dev_kv_lens_ = nullptr;
  int32_t* block_table_ = nullptr;
};

}  // namespace flashserve::bench
