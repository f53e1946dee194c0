// bench_sampling: the GPU sampler (Backend::sample_rows on CUDA) against the path it replaced,
// the logits rows copied to the host and drawn there by the host sampler (sample_token, one
// thread, as the engine thread did). Both times are wall-clock per step for `batch` rows, the
// GPU's including packing, upload, kernel, the ids' download and the wait. For each vocabulary,
// batch and parameter mix it prints one JSON line with both medians, speedup_vs_host_sampler, and
// whether the two paths drew the same tokens.
//   bench_sampling [--reps 20] [--vocab 32000|128256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "backends/backend.h"

using namespace flashserve;
using json = nlohmann::ordered_json;

namespace {

double median_us(int reps, const std::function<void()>& f) {
  std::vector<double> t;
  f();  // warm-up (allocations, first launch)
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

SamplingParams mix(const std::string& name, uint64_t seed) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = seed;
  if (name == "top_k") p.top_k = 50;
  if (name == "top_p") p.top_p = 0.9f;
  if (name == "min_p") p.min_p = 0.05f;
  if (name == "top_k_top_p") {
    p.top_k = 50;
    p.top_p = 0.9f;
  } else if (name == "top_p_min_p") {
    p.top_p = 0.95f;
    p.min_p = 0.05f;
  } else if (name == "penalties") {
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.2f;
  }
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, only_vocab = 0;  // 0: both vocabularies
  const std::string command = flashserve::cli::command_line(argc, argv);
  CLI::App app{"The GPU sampler vs the logits copied to the host and sampled there (JSON lines).",
               "bench_sampling"};
  app.add_option("--reps", reps, "timed repetitions")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--vocab", only_vocab, "only this vocabulary (0: both)")
      ->check(CLI::IsMember({0, 32000, 128256}))->capture_default_str();
  if (const int rc = flashserve::cli::parse(app, argc, argv); rc >= 0) return rc;
  return bench::run_guarded("bench_sampling", [&] {
    const std::string gpu = bench::gpu_name();
    std::unique_ptr<Backend> dev = make_cuda_backend(0);
    std::mt19937 rng(7);
    for (int vocab : {32000, 128256}) {
      if (only_vocab && vocab != only_vocab) continue;
      for (int batch : {1, 16, 64, 256}) {
        // Logits like a language model's: a few likely tokens over a long tail.
        std::vector<float> logits(size_t(batch) * vocab);
        std::normal_distribution<float> n(0.f, 2.f);
        for (float& l : logits) l = n(rng);
        for (int r = 0; r < batch; ++r)
          for (int k = 0; k < 20; ++k) logits[size_t(r) * vocab + rng() % vocab] += 8.f;
        Buffer t = dev->allocate(DType::kF32, {batch, vocab});
        dev->copy_from_host(t.tensor, logits.data());
        std::vector<int32_t> history(256);  // prompt and generated ids for the penalties
        for (int32_t& h : history) h = int32_t(rng() % uint32_t(vocab));
        std::vector<int64_t> rows(static_cast<size_t>(batch));
        for (int r = 0; r < batch; ++r) rows[size_t(r)] = r;
        for (const std::string name : {"temperature", "top_k", "top_p", "min_p", "top_k_top_p",
                                       "top_p_min_p", "penalties"}) {
          std::vector<SamplingParams> params;
          std::vector<SampleRequest> reqs;
          for (int r = 0; r < batch; ++r) params.push_back(mix(name, 1000 + uint64_t(r)));
          for (int r = 0; r < batch; ++r)
            reqs.push_back(SampleRequest{&params[size_t(r)], std::span(history).first(128),
                                         std::span(history).subspan(128), uint64_t(r)});
          std::vector<int32_t> ids_gpu(static_cast<size_t>(batch)), ids_host(ids_gpu);
          std::vector<float> host(logits.size());
          const double gpu_us =
              median_us(reps, [&] { dev->sample_rows(ids_gpu.data(), t.tensor, rows, reqs); });
          // (the host path takes up to seconds for the large cases: fewer repetitions there)
          const int host_reps = int64_t(batch) * vocab > (int64_t(4) << 20) ? 2 : 5;
          const double host_us = median_us(host_reps, [&] {
            dev->copy_to_host(host.data(), t.tensor);
            for (int r = 0; r < batch; ++r) {
              SamplingParams p = params[size_t(r)];
              p.logprobs = -1;
              SampleRequest q = reqs[size_t(r)];
              q.params = &p;
              ids_host[size_t(r)] = sample_token({host.data() + size_t(r) * vocab, size_t(vocab)}, q)
                                        .token;
            }
          });
          json j;
          j["bench"] = "sampling";
          j["gpu"] = gpu;
          j["vocab"] = vocab;
          j["batch"] = batch;
          j["mix"] = name;
          j["gpu_sampler_us"] = gpu_us;
          j["host_sampler_us"] = host_us;
          j["speedup_vs_host_sampler"] = host_us / gpu_us;
          j["tokens_equal"] = ids_gpu == ids_host;
          j["command"] = command;
          bench::print_record(j);
        }
      }
    }
  });
}
