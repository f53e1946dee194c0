// FakeRunner: a ModelRunner without a model, for engine-loop tests. Its "KV cache" stores token
// ids, and the logits of a position are a hash of the tokens read back through the block table,
// so wrong block tables, a bad recompute or batch-dependent results change the output. It can
// also hold steps at a gate, throw on a chosen step, and checks that no block is shared. With
// set_layer_windows() every layer has a sliding window: a position reads only its window's
// tokens, and the block-table entries behind the window (released by the scheduler) are not read.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>

#include "core/error.h"
#include "scheduling/block_allocator.h"
#include "scheduling/kv_window.h"
#include "model/model_runner.h"
#include "sampling/sampler.h"

namespace flashserve {

class FakeRunner : public ModelRunner {
 public:
  FakeRunner(int num_blocks, int block_size, int vocab_size = 64, int max_model_len = 256)
      : bs_(block_size), num_blocks_(num_blocks), kv_(size_t(num_blocks) * block_size, -1) {
    config_.vocab_size = vocab_size;
    config_.max_model_len = max_model_len;
    config_.hidden_size = 8;  // kHidden rows: 8 floats each
    config_.eos_token_ids = {2};
  }

  // Call before handing the runner to an engine (it reads the config once).
  void set_layer_windows(std::vector<int> windows) {
    config_.layer_windows = std::move(windows);
    window_ = shared_kv_window(config_.layer_windows);
  }

  const ModelConfig& config() const override { return config_; }
  std::string backend_name() const override { return "fake"; }
  int block_size() const override { return bs_; }
  int num_kv_blocks() const override { return num_blocks_; }

  // The logits row after `prefix` (also used by tests to check prompt logprobs).
  static void logits_after(const std::vector<int32_t>& prefix, int vocab, float* row) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : prefix) h = (h ^ uint64_t(t + 11)) * 1099511628211ull;
    for (int v = 0; v < vocab; ++v) {
      uint64_t x = (h + uint64_t(v) * 0x9E3779B97F4A7C15ull);
      x ^= x >> 31;
      x *= 0xBF58476D1CE4E5B9ull;
      x ^= x >> 29;
      row[v] = float(x % 2000) / 200.f - 5.f;  // [-5, 5)
    }
  }

  void step(StepPlan& batch, std::vector<float>* logits, std::vector<int32_t>* sampled_ids,
            std::vector<float>* hidden) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      in_step_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !gate_closed_; });
      in_step_ = false;
    }
    const int n = ++steps_;
    if (n == throw_on_step_) FS_THROW("injected backend fault");
    std::set<BlockId> used;
    for (const StepChunk& c : batch.chunks) {
      const auto& table = *c.block_table;
      FS_CHECK(int64_t(table.size()) * bs_ >= c.num_cached + c.num_tokens, "short block table");
      const size_t behind = size_t(blocks_before_window(c.num_cached, window_, bs_));
      for (size_t i = 0; i < table.size(); ++i) {
        FS_CHECK(table[i] >= 0 && table[i] < num_blocks_, "bad block ", table[i]);
        if (i >= behind)
          FS_CHECK(used.insert(table[i]).second, "block ", table[i], " shared by two sequences");
      }
      for (int i = 0; i < c.num_tokens; ++i) kv_[slot(table, c.num_cached + i)] = c.tokens[i];
      const int end = c.num_cached + c.num_tokens;
      const int first = c.logits == LogitsWanted::kAll ? c.num_cached : end - 1;
      if (c.logits == LogitsWanted::kNone) continue;
      if (c.logits == LogitsWanted::kHidden) {  // the state "after" `end` tokens
        FS_CHECK(hidden != nullptr, "kHidden chunk without hidden");
        hidden->insert(hidden->end(), size_t(config_.hidden_size), float(end));
        continue;
      }
      for (int pos = first; pos < end; ++pos) {
        std::vector<int32_t> prefix;
        for (int p = window_ > 0 ? std::max(0, pos - window_ + 1) : 0; p <= pos; ++p)
          prefix.push_back(kv_[slot(table, p)]);
        std::vector<float> row(size_t(config_.vocab_size));
        logits_after(prefix, config_.vocab_size, row.data());
        if (c.sample_path != SamplePath::kHost) {  // as a device sampler: only the token back
          FS_CHECK(sampled_ids != nullptr && c.logits == LogitsWanted::kLast, "bad sampled chunk");
          if (c.sample_path == SamplePath::kArgmax) {  // ties to the lowest id
            sampled_ids->push_back(int32_t(std::max_element(row.begin(), row.end()) - row.begin()));
            ++greedy_rows_;
          } else {
            SamplingParams p = *c.sample.params;
            p.logprobs = -1;
            SampleRequest q = c.sample;
            q.params = &p;
            sampled_ids->push_back(sample_token(row, q).token);
            ++drawn_rows_;
          }
        } else {
          logits->insert(logits->end(), row.begin(), row.end());
        }
      }
      max_batch_ = std::max<int>(max_batch_, int(batch.chunks.size()));
    }
  }

  // Test controls (any thread).
  void close_gate() {
    std::lock_guard<std::mutex> lock(mu_);
    gate_closed_ = true;
  }
  void open_gate() {
    std::lock_guard<std::mutex> lock(mu_);
    gate_closed_ = false;
    cv_.notify_all();
  }
  void wait_in_step() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return in_step_; });
  }
  int steps() const { return steps_.load(); }
  int max_batch() const { return max_batch_.load(); }
  int greedy_rows() const { return greedy_rows_.load(); }  // rows answered by argmax
  int drawn_rows() const { return drawn_rows_.load(); }    // rows drawn by the sampler
  void throw_on_step(int n) { throw_on_step_ = n; }

 private:
  int slot(const std::vector<BlockId>& table, int pos) const {
    return table[pos / bs_] * bs_ + pos % bs_;
  }
  ModelConfig config_;
  int bs_, num_blocks_;
  int window_ = 0;  // shared_kv_window(config_.layer_windows)
  std::vector<int32_t> kv_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool gate_closed_ = false, in_step_ = false;
  std::atomic<int> steps_{0}, max_batch_{0}, throw_on_step_{-1}, greedy_rows_{0},
      drawn_rows_{0};
};

}  // namespace flashserve
