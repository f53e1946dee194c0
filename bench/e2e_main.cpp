// bench_e2e: end-to-end generation benchmarks through the Engine (scheduler, model, sampler,
// streams: everything but HTTP), printing JSON lines to stdout (humans read stderr). Cases, all
// on one loaded model, greedy with EOS ignored so every request runs to its length:
//   decode:1xPxO    batch-1 decode tokens/s (one request at a time) and frac_of_roofline =
//                   tokens/s / ((weight + KV bytes per token) / copy bandwidth)
//   offline:NxPxO   N requests submitted at once: output tokens/s and frac_of_step_lower_bound
//                   (bench/e2e_cost.h: ideal-schedule time / measured time)
// With --json-schema each case runs again with every request constrained (structured outputs);
// that record carries speedup_vs_unconstrained (its tokens/s over the free run's); with
// --synthetic-vocab N the grammar's vocabulary is the tokenizer's stretched to the model's N tokens.
// The ceilings (copy bandwidth, cuBLASLt bf16 rate) are measured in this process first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/e2e_cost.h"
#include "bench/e2e_run.h"
#include "bench/hw_ceilings.h"
#include "cli/cli.h"
#include "core/error.h"
#include "engine/engine.h"
#include "parallel/communicator.h"
#include "tokenizer/tokenizer.h"
#include "weights/loaded_model.h"

#if FS_BENCH_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace flashserve;
using json = nlohmann::ordered_json;
using bench::Clock;
using bench::median;
using bench::BatchOptions;
using bench::failure_of;
using bench::make_prompts;
using bench::run_batch;
using bench::RunResult;
using bench::seconds;

namespace {

constexpr const char* kCasesHelp =
    "Cases:\n"
    "  decode:1xPxO   --repeats runs of one request (prompt P, O tokens) after a warm-up run;\n"
    "                 reports the median decode tokens/s\n"
    "  offline:NxPxO  N requests at once after a short warm-up batch\n"
    "A case with a refused, failed or timed-out request is an error: its record has \"error\" and no\n"
    "throughput fields, and bench_e2e exits 1.";

struct Case {
  std::string mode;  // "decode" | "offline"
  int num_requests = 1, prompt_len = 128, output_len = 256;
};

struct Args {
  std::string model, backend = "cuda", label, quantize = "none";
  std::vector<Case> cases;
  int repeats = 3, max_num_seqs = 256, max_num_batched_tokens = 8192, threads = 0;
  int tensor_parallel_size = 1;
  int graph_max_batch = ModelRunnerOptions{}.graph_max_batch;
  int64_t kv_cache_tokens = 0;
  double max_seconds = 120;
  bool ceilings = true;
  SamplingParams sampling = [] {
    SamplingParams p;
    p.temperature = 0.f;
    return p;
  }();
  bool host_sampling = false;
  bool prefix_caching = false;  // off: repeated runs of the same prompts must not reuse their KV
  std::string json_schema, tokenizer;  // --json-schema: constrained runs beside the plain ones
  int synthetic_vocab = 0;             // > 0: the constraint's vocabulary stretched to this size
  std::string command;
};

std::vector<Case> parse_cases(const std::string& text) {
  std::vector<Case> cases;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    Case c;
    const size_t colon = item.find(':');
    char x1 = 0, x2 = 0;
    int used = 0;
    c.mode = item.substr(0, colon);
    const bool ok = colon != std::string::npos &&
                    std::sscanf(item.c_str() + colon + 1, "%d%c%d%c%d%n", &c.num_requests, &x1,
                                &c.prompt_len, &x2, &c.output_len, &used) == 5 &&
                    x1 == 'x' && x2 == 'x' && size_t(used) == item.size() - colon - 1 &&
                    (c.mode == "offline" || (c.mode == "decode" && c.num_requests == 1)) &&
                    c.num_requests >= 1 && c.prompt_len >= 1 && c.output_len >= 2;
    if (!ok) throw CLI::ValidationError("--cases", "bad case '" + item + "' (decode:1xPxO or offline:NxPxO)");
    cases.push_back(c);
  }
  if (cases.empty()) throw CLI::ValidationError("--cases", "no case given");
  return cases;
}

// Parses the command line (cli/cli.h conventions); exits 0 after --help, 2 on a usage error.
Args parse_args(int argc, char** argv) {
  Args a;
  a.command = cli::command_line(argc, argv);
  std::string cases = "decode:1x128x256";
  bool no_ceilings = false;
  CLI::App app{"End-to-end generation benchmarks through the Engine; JSON lines on stdout.", "bench_e2e"};
  app.footer(kCasesHelp);
  app.add_option("--model", a.model, "model folder or .bin")->required();
  app.add_option("--backend", a.backend)->check(CLI::IsMember({"cuda", "cpu", "auto"}))
      ->capture_default_str();
  app.add_option("--label", a.label, "the records' model name (default: --model)");
  cli::add_quantize_flag(app, a.quantize);
  app.add_option("--cases", cases, "comma-separated decode:1xPxO and offline:NxPxO")
      ->capture_default_str();
  app.add_option("--repeats", a.repeats, "decode runs after the warm-up")->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--max-num-seqs", a.max_num_seqs)->check(CLI::Range(1, 1 << 16))->capture_default_str();
  app.add_option("--max-num-batched-tokens", a.max_num_batched_tokens)->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--kv-cache-tokens", a.kv_cache_tokens,
                 "0: room for the largest case at once, capped by free GPU memory")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--max-seconds", a.max_seconds, "a case still running after this is cancelled (an error)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads, 0 = all cores")->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--cuda-graph-max-batch", a.graph_max_batch,
                 "decode steps up to this batch replay CUDA graphs; 0 = eager")
      ->check(CLI::Range(0, 1 << 16))->capture_default_str();
  app.add_option("--tensor-parallel-size", a.tensor_parallel_size,
                 "split the model over N GPUs (NCCL); records carry tensor_parallel_size")
      ->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--no-ceilings", no_ceilings, "1: skip measuring copy bandwidth and GEMM rate");
  app.add_option("--temperature", a.sampling.temperature, "the requests' sampling (default greedy)")
      ->check(CLI::Range(0.0f, 100.0f))->capture_default_str();
  app.add_option("--top-k", a.sampling.top_k)->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--top-p", a.sampling.top_p)->check(CLI::PositiveNumber)->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--host-sampling", a.host_sampling,
                 "1: copy every logits row to the host sampler (the GPU sampler's baseline)");
  app.add_option("--prefix-caching", a.prefix_caching,
                 "1: keep the engine's prefix cache on. Off by default: the warm-up and every\n"
                 "repeat send the same prompts, which would then skip their prefill");
  auto* schema = app.add_option("--json-schema", a.json_schema,
                 "FILE or 'realistic' (built in): each case runs twice, free and with every request\n"
                 "constrained to an array of at least 1000 objects matching this schema (so it runs\n"
                 "to its length); the constrained record carries speedup_vs_unconstrained");
  app.add_option("--tokenizer", a.tokenizer, "the vocabulary of --json-schema (default: the model's)");
  app.add_option("--synthetic-vocab", a.synthetic_vocab,
                 "the --json-schema vocabulary stretched to N tokens by joining the tokenizer's\n"
                 "pieces (N: the model's vocab_size), for a model larger than the tokenizer at hand")
      ->check(CLI::Range(1, 1 << 20))->needs(schema);
  app.callback([&] { a.cases = parse_cases(cases); });  // a bad case is a usage error
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) std::exit(rc);
  prepare_cuda_for_tensor_parallelism(a.tensor_parallel_size);  // before any CUDA call
  a.ceilings = !no_ceilings;
  if (a.label.empty()) a.label = a.model;
  return a;
}

ModelConfig unquantized(ModelConfig c) {
  c.quant_method = "";
  return c;
}

json shape_json(const ModelConfig& c) {
  return {{"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_layers", c.num_layers},
          {"num_q_heads", c.num_q_heads},
          {"num_kv_heads", c.num_kv_heads},
          {"head_dim", c.head_dim},
          {"vocab_size", c.vocab_size},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"weight_bytes_bf16", bench::resident_weight_bytes(unquantized(c))}};
}

// KV tokens for the largest case's requests all at once, capped by what free device memory
// leaves after weights and 4 GiB of workspace (the runner's own sizing stops at 8 full-length
// sequences, too few for the offline cases).
int64_t kv_tokens_for(const Args& a, const ModelConfig& c) {
  if (a.kv_cache_tokens > 0) return a.kv_cache_tokens;
  int64_t want = 0, per_seq_max = 0;
  for (const Case& k : a.cases) {
    const int64_t per_seq = ((k.prompt_len + k.output_len + 15) / 16 + 1) * 16;
    want = std::max(want, per_seq * k.num_requests);
    per_seq_max = std::max(per_seq_max, per_seq);
  }
#if FS_BENCH_HAS_CUDA
  size_t free_b = 0, total_b = 0;
  if (a.backend != "cpu" && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
    // Tensor parallelism: each GPU holds about 1/N of the weights and min(N, kv heads) of the
    // KV heads' share (the replicated embedding and norms are inside the 4 GiB).
    const int tp = a.tensor_parallel_size;
    const double room = double(free_b) - bench::resident_weight_bytes(c) / tp - double(size_t(4) << 30);
    const double kv_per_token = bench::kv_bytes_per_token(c) / std::min(tp, c.num_kv_heads);
    want = std::min<int64_t>(want, std::max<int64_t>(per_seq_max, int64_t(room / kv_per_token)));
  }
  cudaGetLastError();
#endif
  return want;
}

json decode_case(Engine& engine, const Args& a, const BatchOptions& o, const Case& k,
                 const ModelConfig& c, const bench::HwCeilings& hw, json j) {
  const auto one = make_prompts(1, k.prompt_len, c);
  RunResult last = run_batch(engine, one, k.output_len, o);  // warm-up: allocations, graphs, caches
  std::string failure = failure_of(last, 1, a.max_seconds);
  std::vector<double> tps, ttft;
  for (int i = 0; i < a.repeats && failure.empty(); ++i) {
    last = run_batch(engine, one, k.output_len, o);
    failure = failure_of(last, 1, a.max_seconds);
    if (!failure.empty() || last.decode_s.empty()) break;
    tps.push_back(double(last.output_tokens - 1) / last.decode_s[0]);
    ttft.push_back(last.ttft_s[0]);
  }
  j["batch_size"] = 1;
  j["output_tokens_last_run"] = last.output_tokens;
  j["timed_out"] = last.timed_out;
  j["all_finished_by_length"] = last.num_not_length == 0;
  if (!failure.empty() || tps.empty()) {
    j["error"] = failure.empty() ? "no decode step was timed" : failure;
    std::fprintf(stderr, "decode 1x%d/%d: FAILED: %s\n", k.prompt_len, k.output_len,
                 j["error"].get<std::string>().c_str());
    return j;
  }
  j["repeats"] = tps.size();
  j["decode_tokens_per_s"] = median(tps);
  j["decode_tokens_per_s_runs"] = tps;
  j["ttft_ms"] = median(ttft) * 1e3;
  if (hw.available) {
    // With tensor parallelism each GPU reads 1/N of the bytes at once: N times the roofline.
    const double roof = a.tensor_parallel_size * bench::decode_roofline_tokens_per_s(
                                                     c, k.prompt_len, k.output_len, hw.copy_bytes_per_s);
    j["roofline_tokens_per_s"] = roof;
    j["frac_of_roofline"] = median(tps) / roof;
  }
  std::fprintf(stderr, "decode 1x%d/%d: %.1f tokens/s, TTFT %.1f ms\n", k.prompt_len, k.output_len,
               median(tps), median(ttft) * 1e3);
  return j;
}

json offline_case(Engine& engine, const Args& a, const BatchOptions& o, const Case& k,
                  const ModelConfig& c, const bench::HwCeilings& hw, json j) {
  // Warm-up with a few short requests so first-use costs stay out of the timed batch.
  run_batch(engine, make_prompts(std::min(k.num_requests, 8), k.prompt_len, c), 4, o);
  const RunResult r =
      run_batch(engine, make_prompts(k.num_requests, k.prompt_len, c), k.output_len, o);
  j["num_requests"] = k.num_requests;
  j["elapsed_s"] = r.elapsed_s;
  j["output_tokens"] = r.output_tokens;
  j["timed_out"] = r.timed_out;
  j["all_finished_by_length"] = r.num_not_length == 0;
  if (const std::string failure = failure_of(r, size_t(k.num_requests), a.max_seconds);
      !failure.empty()) {
    j["error"] = failure;  // and no throughput: refused requests are not tokens served
    std::fprintf(stderr, "offline %dx%d/%d: FAILED: %s\n", k.num_requests, k.prompt_len,
                 k.output_len, failure.c_str());
    return j;
  }
  j["output_tokens_per_s"] = double(r.output_tokens) / r.elapsed_s;
  j["total_tokens_per_s"] =
      double(r.output_tokens + int64_t(k.num_requests) * k.prompt_len) / r.elapsed_s;
  j["ttft_s_median"] = median(r.ttft_s);
  if (hw.available) {
    const int tp = a.tensor_parallel_size;  // N GPUs: N times the FLOP rate and bandwidth
    const bench::OfflineBound b =
        bench::offline_lower_bound(c, k.num_requests, k.prompt_len, k.output_len,
                                   tp * hw.bf16_flops_per_s, tp * hw.copy_bytes_per_s);
    j["step_lower_bound_s"] = b.ideal_schedule_s;
    j["flops_bound_s"] = b.flops_s;
    j["bytes_bound_s"] = b.bytes_s;
    j["frac_of_step_lower_bound"] = b.ideal_schedule_s / r.elapsed_s;
    j["frac_of_total_lower_bound"] = std::max(b.flops_s, b.bytes_s) / r.elapsed_s;
  }
  std::fprintf(stderr, "offline %dx%d/%d: %.1f output tokens/s in %.2f s\n", k.num_requests,
               k.prompt_len, k.output_len, double(r.output_tokens) / r.elapsed_s, r.elapsed_s);
  return j;
}

const char* bench_name(const Case& k) { return k.mode == "decode" ? "e2e_decode" : "e2e_offline"; }

void print_line(const json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

int run(const Args& a) {
  bench::HwCeilings hw;
  if (a.ceilings && a.backend != "cpu") {
    try {
      hw = bench::measure_hw_ceilings();
    } catch (const std::exception& e) {  // the benchmarks still run, their ratios stay null
      print_line({{"bench", "e2e_ceilings"}, {"command", a.command}, {"error", e.what()}});
      hw = bench::HwCeilings{};
    }
  }
  const std::string gpu = hw.available ? hw.gpu : bench::gpu_name();
  if (hw.available)
    print_line({{"bench", "e2e_ceilings"},
                {"gpu", hw.gpu},
                {"command", a.command},
                {"copy_gb_s", hw.copy_bytes_per_s / 1e9},
                {"bf16_tflops", hw.bf16_flops_per_s / 1e12},
                {"gemm_shape", hw.gemm_shape}});

  auto model = load_model(a.model, LoadOptions{.quantize = parse_quantize(a.quantize)});
  const ModelConfig& c = model->config();
  ModelRunnerOptions ro;
  ro.backend = a.backend;
  ro.threads = a.threads;
  ro.kv_cache_tokens = kv_tokens_for(a, c);
  ro.graph_max_batch = a.graph_max_batch;
  ro.tensor_parallel_size = a.tensor_parallel_size;
  const auto t_load = Clock::now();
  auto runner = ModelRunner::create(*model, ro);
  const double load_s = seconds(t_load, Clock::now());
  const std::string backend = runner->backend_name();
  const int64_t kv_tokens = int64_t(runner->num_kv_blocks()) * runner->block_size();
  EngineOptions eo;
  eo.max_num_seqs = a.max_num_seqs;
  eo.max_num_batched_tokens = a.max_num_batched_tokens;
  eo.sample_on_device = !a.host_sampling;
  eo.enable_prefix_caching = a.prefix_caching;
  for (const Case& k : a.cases) eo.max_queue = std::max(eo.max_queue, k.num_requests + 8);
  auto engine = Engine::create(std::move(runner), eo);
  std::fprintf(stderr, "%s: backend %s, load %.1f s, KV cache %lld tokens\n", a.label.c_str(),
               backend.c_str(), load_s, (long long)kv_tokens);

  std::optional<OutputConstraint> constraint;
  if (!a.json_schema.empty())
    constraint = bench::json_schema_constraint(
        a.json_schema, a.tokenizer.empty() ? find_tokenizer_file(a.model) : a.tokenizer, c,
        a.synthetic_vocab);
  int failures = 0;
  // One record: case k, with every request under `constrained` or free.
  auto run_case = [&](const Case& k, const OutputConstraint* constrained) {
    json j;
    j["bench"] = bench_name(k);
    j["model"] = a.label;
    j["gpu"] = gpu;
    j["command"] = a.command;
    j["backend"] = backend;
    // The weights' format (bench/e2e_cost.h); "dtype" is the older name of the same field.
    j["weights"] = bench::weights_format(c, backend.rfind("cuda", 0) == 0);
    j["dtype"] = c.quant_method == "fp8" ? "fp8" : backend.rfind("cuda", 0) == 0 ? "bf16" : "f32";
    j["weight_bytes"] = bench::resident_weight_bytes(c);
    j["shape"] = shape_json(c);
    j["prompt_len"] = k.prompt_len;
    j["output_len"] = k.output_len;
    j["kv_cache_tokens"] = kv_tokens;
    j["load_s"] = load_s;
    j["max_num_seqs"] = a.max_num_seqs;
    j["max_num_batched_tokens"] = a.max_num_batched_tokens;
    j["cuda_graph_max_batch"] = a.graph_max_batch;
    j["tensor_parallel_size"] = a.tensor_parallel_size;
    j["temperature"] = a.sampling.temperature;
    j["top_k"] = a.sampling.top_k;
    j["top_p"] = a.sampling.top_p;
    j["sampler"] = a.host_sampling ? "host" : "device";
    j["prefix_caching"] = a.prefix_caching;
    j["constraint"] = constrained ? "json_schema:" + a.json_schema : "none";
    if (constrained)  // the grammar's vocabulary: the tokenizer's, or stretched to the model's
      j["constraint_vocab"] =
          a.synthetic_vocab > 0 ? "synthetic:" + std::to_string(a.synthetic_vocab) : "tokenizer";
    const BatchOptions o{a.sampling, a.max_seconds, constrained};
    j["pdl"] = backend.rfind("cuda", 0) == 0;  // kernels/cuda/pdl.cuh: on wherever CUDA runs
    j["copy_gb_s"] = hw.available ? json(hw.copy_bytes_per_s / 1e9) : json(nullptr);
    j["bf16_tflops"] = hw.available ? json(hw.bf16_flops_per_s / 1e12) : json(nullptr);
    try {
      const EngineMetrics m0 = engine->metrics();
      json result = k.mode == "decode" ? decode_case(*engine, a, o, k, c, hw, j)
                                       : offline_case(*engine, a, o, k, c, hw, j);
      // Where the engine thread spent the case (warm-up runs included), per step.
      const EngineMetrics m1 = engine->metrics();
      const double steps = double(m1.steps_total - m0.steps_total);
      // Prompt tokens whose prefill the prefix cache skipped (0 unless --prefix-caching 1).
      result["prompt_tokens_from_cache"] =
          m1.prefix_cache_hits_tokens_total - m0.prefix_cache_hits_tokens_total;
      if (steps > 0) {
        result["engine_steps"] = m1.steps_total - m0.steps_total;
        result["engine_schedule_ms_per_step"] =
            1e3 * (m1.schedule_seconds_total - m0.schedule_seconds_total) / steps;
        result["engine_forward_ms_per_step"] =
            1e3 * (m1.forward_seconds_total - m0.forward_seconds_total) / steps;
        result["engine_sample_ms_per_step"] =
            1e3 * (m1.sample_seconds_total - m0.sample_seconds_total) / steps;
      }
      if (result.contains("error")) ++failures;  // refused, failed or timed out
      return result;
    } catch (const std::exception& e) {          // one case failing must not hide the others
      ++failures;
      j["error"] = e.what();
      std::fprintf(stderr, "bench_e2e: %s case failed: %s\n", k.mode.c_str(), e.what());
      return j;
    }
  };
  for (const Case& k : a.cases) {
    const json free = run_case(k, nullptr);
    print_line(free);
    if (!constraint) continue;
    json constrained = run_case(k, &*constraint);
    const char* rate = k.mode == "decode" ? "decode_tokens_per_s" : "output_tokens_per_s";
    if (free.contains(rate) && constrained.contains(rate))
      constrained["speedup_vs_unconstrained"] = constrained[rate].get<double>() / free[rate].get<double>();
    print_line(constrained);
  }
  engine->shutdown();
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    // One record per case saying what failed, so a results file never silently lacks one.
    for (const Case& k : args.cases)
      print_line({{"bench", bench_name(k)},
                  {"model", args.label},
                  {"command", args.command},
                  {"prompt_len", k.prompt_len},
                  {"output_len", k.output_len},
                  {"num_requests", k.num_requests},
                  {"error", e.what()}});
    std::fprintf(stderr, "bench_e2e: error: %s\n", e.what());
    return 1;
  }
}
