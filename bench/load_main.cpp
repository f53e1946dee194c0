// bench_load: how fast a checkpoint folder becomes a model on the device, from the page cache.
// Each repeat opens the folder (load_model: parsing, mapping, any conversion at load) and
// uploads it (ModelRunner::create, with a small KV cache), then frees both. The first repeat
// also warms the page cache, so the record keeps the median of the rest. GB/s is the folder's
// checkpoint bytes (*.safetensors, *.bin) over the whole time; the record names the format the
// checkpoint holds (int4 ones are converted by the backend as it loads them, a log line each).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "cli/cli.h"
#include "core/error.h"
#include "model/model_runner.h"
#include "weights/loaded_model.h"
#include "weights/quant_config.h"

using namespace flashserve;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t checkpoint_bytes(const std::string& dir) {
  int64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    // tok*.bin beside a llama2.c checkpoint is its tokenizer, not weights (as the loader says).
    const bool tokenizer = e.path().filename().string().rfind("tok", 0) == 0;
    if (e.is_regular_file() && !tokenizer && (ext == ".safetensors" || ext == ".bin"))
      bytes += int64_t(e.file_size());
  }
  return bytes;
}

// What the checkpoint holds: its quant_method for a quantized checkpoint (int4: gptq, awq,
// compressed-tensors; fp8; fp8-block), else the embeddings' dtype (bf16, f16, f32), which
// --quantize leaves as stored.
std::string checkpoint_format(const LoadedModel& m) {
  const QuantConfig& q = m.config().quant;
  if (q.is_int4()) return q.method;
  if (q.format == QuantFormat::kFp8) return "fp8";
  if (q.format == QuantFormat::kBlockFp8) return "fp8-block";
  return dtype_name(m.tensor("model.embed_tokens.weight").dtype);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, label, format, backend = "cuda", quantize = "none";
  int repeats = 4;
  CLI::App app{"Checkpoint load time from the page cache (a JSON line).", "bench_load"};
  app.add_option("--model", model, "checkpoint folder")->required();
  app.add_option("--label", label, "model shape name for the record");
  app.add_option("--format", format, "what the checkpoint must hold (bf16, gptq, awq, "
                 "compressed-tensors, fp8, fp8-block, ..); the record says what it does hold");
  app.add_option("--backend", backend, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  cli::add_quantize_flag(app, quantize);
  app.add_option("--repeats", repeats, "loads; the first warms the page cache")
      ->check(CLI::Range(2, 100));
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const std::string command = cli::command_line(argc, argv);
  return bench::run_guarded("bench_load", [&] {
    const int64_t bytes = checkpoint_bytes(model);
    FS_CHECK(bytes > 0, model, ": no *.safetensors or *.bin files");
    std::vector<double> open_s, upload_s, total_s;
    std::string held, quantization;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = Clock::now();
      // --quantize fp8 as the server runs it: on the GPU with the CUDA backend.
      auto loaded = load_model(model, LoadOptions{.quantize = parse_quantize(quantize),
                                                  .fp8_in_backend = backend == "cuda"});
      const double opened = seconds_since(t0);
      held = checkpoint_format(*loaded);
      quantization = describe_quantization(loaded->config().quant);
      if (!format.empty() && format != held)
        FS_THROW(model, ": --format ", format, " but the checkpoint holds ", held);
      ModelRunnerOptions ro;
      ro.backend = backend;
      ro.kv_cache_tokens = 4096;
      ro.graph_max_batch = 0;
      auto runner = ModelRunner::create(*loaded, ro);
      const double total = seconds_since(t0);
      if (r == 0) continue;  // page-cache warm-up
      open_s.push_back(opened);
      upload_s.push_back(total - opened);
      total_s.push_back(total);
    }
    const double median = bench::percentile(total_s, 0.5);
    nlohmann::ordered_json j = {{"bench", "load"},
                                {"gpu", backend == "cpu" ? "cpu" : bench::gpu_name()},
                                {"command", command},
                                {"model", label},
                                {"format", held},
                                {"quantization", quantization},
                                {"quantize", quantize},
                                {"checkpoint_bytes", bytes},
                                {"open_s_median", bench::percentile(open_s, 0.5)},
                                {"upload_s_median", bench::percentile(upload_s, 0.5)},
                                {"load_s_median", median},
                                {"load_s_runs", total_s},
                                {"gb_s", double(bytes) / median / 1e9},
                                {"target_gb_s", 4.0}};
    bench::print_record(j);
  });
}
