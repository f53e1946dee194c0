// bench_e2e's runs: a batch of fixed-length requests submitted to the Engine at once and timed
// per request, the prompts they use, and the output constraint of its --json-schema mode.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace flashserve::bench {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b);
double median(std::vector<double> v);

// Fixed-length random prompts (BOS + ids from common pieces), the same for every run.
std::vector<std::vector<int32_t>> make_prompts(int n, int len, const ModelConfig& c);

struct BatchOptions {
  SamplingParams sampling;  // each request's seed is its index
  double max_seconds = 120;  // then the rest is cancelled (timed_out)
  const OutputConstraint* constraint = nullptr;  // every request's, or none
};

struct RunResult {
  double elapsed_s = 0;          // first submit to last finish
  std::vector<double> ttft_s;    // per request
  std::vector<double> decode_s;  // first token to finish, per request
  int64_t output_tokens = 0;
  int num_not_length = 0;  // requests that did not finish by max_tokens
  bool timed_out = false;
  std::string first_error;
};

// Submits every prompt at once (EOS ignored), drains all streams round-robin, times each request.
RunResult run_batch(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                    int output_len, const BatchOptions& o);

// Why a run is not a measurement ("" when every request ran to its length in time): a refused
// or failed request, a timeout, or a request that ended early. Such a case reports no throughput.
std::string failure_of(const RunResult& r, size_t num_requests, double max_seconds);

// --json-schema: the schema in `schema_file` ("realistic": a built-in object schema of the kind
// API clients send) compiled over the tokenizer's vocabulary, as the grammar of an array of at
// least 1000 such objects, so that every request runs to its length (a fixed-length benchmark)
// through masks of every kind (structure, keys, enums, free strings, numbers). synthetic_vocab
// > 0: the tokenizer's vocabulary stretched to that many tokens (bench/synthetic_vocab.h), which
// must be the model's vocab_size, so a model with a larger vocabulary than the tokenizer's gets
// masks over that many real-looking tokens; 0: the tokenizer's, ids past it never allowed.
OutputConstraint json_schema_constraint(const std::string& schema_file,
                                        const std::string& tokenizer_file, const ModelConfig& c,
                                        int synthetic_vocab);

}  // namespace flashserve::bench
