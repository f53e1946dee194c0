// bench_tp_collectives: the time tensor parallelism's collectives take per decode step, apart from
// the step (bench_e2e times whole steps, where CUDA graphs hide which kernel took what). For a
// model's shape (config.json), N ranks and m sequences, a step's collectives are LlamaModel's:
// 2 all-reduces of [m, hidden_size] (bf16 on GPUs, f32 on the CPU) per layer and one all-gather
// of [m, vocab_size / N] f32 logits. Each rank records them into a CUDA graph on its own GPU
// (as a decode step does) and replays it; on the CPU they run eagerly through the stand-in.
// One JSON line per m: all-reduce and gather milliseconds per step, bytes, per-call microseconds.
//   bench_tp_collectives --model DIR --tensor-parallel-size N [--batch 1,16,64] [--backend cuda]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/backend.h"
#include "bench/graph_timer.h"
#include "bench/hw_ceilings.h"
#include "bench/record.h"
#include "cli/cli.h"
#include "parallel/communicator.h"
#include "parallel/rank_workers.h"
#include "weights/hf_config.h"

using namespace flashserve;
using json = nlohmann::ordered_json;

namespace {

struct Args {
  std::string model, backend = "cuda", command;
  int tp = 2, reps = 20;
  bool symmetric = false;  // all-reduce in the communicator's symmetric buffer
  std::vector<int> batches = {1, 16, 64};
};

// Seconds per call of `op` on this rank: in a replayed CUDA graph, or (CPU) eagerly.
double time_op(Backend& be, const std::function<void(int)>& op, int reps) {
  if (be.device() == Device::kCuda) return bench::time_in_graph(be, op, reps);
  op(0);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) op(i);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

int run(const Args& a) {
  const std::filesystem::path dir(a.model);
  const ModelConfig c = read_hf_config((dir / "config.json").string());
  FS_CHECK(c.vocab_size % a.tp == 0, "vocab_size ", c.vocab_size, " does not divide by ", a.tp);
  const bool cuda = a.backend == "cuda";
  const std::string gpu = cuda ? bench::gpu_name() : "cpu";
  auto comms = cuda ? make_nccl_group(a.tp) : make_local_group(a.tp);
  std::vector<std::unique_ptr<Backend>> backends(static_cast<size_t>(a.tp));
  RankWorkers workers(a.tp, [&] {
    for (auto& k : comms) k->abort();
  });
  workers.run([&](int r) {
    backends[size_t(r)] = cuda ? make_cuda_backend(r) : make_cpu_backend(1);
    comms[size_t(r)]->bind_stream(backends[size_t(r)]->native_stream());
  });
  const DType act = cuda ? DType::kBF16 : DType::kF32;
  const int64_t vocab_local = c.vocab_size / a.tp;
  // --symmetric: one buffer for the largest batch, registered once (a collective), as the model
  // runner does for steps of up to 4 tokens (model/tensor_parallel_runner.cpp).
  std::vector<void*> symmetric(size_t(a.tp), nullptr);
  if (a.symmetric) {
    const int max_m = *std::max_element(a.batches.begin(), a.batches.end());
    workers.run([&](int r) {
      symmetric[size_t(r)] = comms[size_t(r)]->symmetric_buffer(
          size_t(max_m) * size_t(c.hidden_size) * dtype_size(act));
    });
    FS_CHECK(symmetric[0] != nullptr, "--symmetric: ", comms[0]->name(), " has no symmetric memory");
  }
  for (const int m : a.batches) {
    std::vector<double> reduce_s(size_t(a.tp)), gather_s(size_t(a.tp));
    workers.run([&](int r) {
      Backend& be = *backends[size_t(r)];
      Communicator& comm = *comms[size_t(r)];
      Buffer x = be.allocate(act, {m, c.hidden_size});
      if (a.symmetric) x.tensor = Tensor(symmetric[size_t(r)], act, be.device(), {m, c.hidden_size});
      Buffer local = be.allocate(DType::kF32, {m, vocab_local});
      Buffer all = be.allocate(DType::kF32, {int64_t(a.tp) * m, vocab_local});
      std::vector<char> zeros(std::max(x.tensor.bytes(), local.tensor.bytes()), 0);
      be.copy_from_host(x.tensor, zeros.data());  // sums of zeros stay finite
      be.copy_from_host(local.tensor, zeros.data());
      auto reduces = [&](int) {
        for (int l = 0; l < 2 * c.num_layers; ++l)
          comm.all_reduce_sum(x.tensor.data, x.tensor.numel(), act);
      };
      auto gather = [&](int) { comm.all_gather(local.tensor.data, all.tensor.data, local.tensor.numel(), DType::kF32); };
      reduce_s[size_t(r)] = time_op(be, reduces, a.reps);
      gather_s[size_t(r)] = time_op(be, gather, a.reps);
      comm.barrier();
    });
    // Every rank waits for the slowest in each collective: the ranks' times agree; rank 0's.
    const double ar_ms = reduce_s[0] * 1e3, ag_ms = gather_s[0] * 1e3;
    json j = bench::record_head("tp_collectives", gpu, a.command, dir.filename().string(), m);
    j["tensor_parallel_size"] = a.tp;
    j["communicator"] = comms[0]->name();
    j["symmetric_memory"] = a.symmetric;
    j["all_reduces_per_step"] = 2 * c.num_layers;
    j["all_reduce_bytes"] = int64_t(m) * c.hidden_size * int64_t(dtype_size(act));
    j["gather_bytes_per_rank"] = int64_t(m) * vocab_local * 4;
    j["allreduce_ms_per_step"] = ar_ms;
    j["gather_ms_per_step"] = ag_ms;
    j["collectives_ms_per_step"] = ar_ms + ag_ms;
    j["us_per_all_reduce"] = ar_ms * 1e3 / (2 * c.num_layers);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "TP %d m %d: all-reduces %.3f ms/step (%.1f us each), gather %.3f ms\n",
                 a.tp, m, ar_ms, ar_ms * 1e3 / (2 * c.num_layers), ag_ms);
  }
  workers.run([&](int r) {  // each rank's state on its own thread, communicator first
    comms[size_t(r)].reset();
    backends[size_t(r)].reset();
  });
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  a.command = cli::command_line(argc, argv);
  std::string batches = "1,16,64";
  CLI::App app{"Tensor parallelism's collectives per decode step, timed alone (JSON lines).",
               "bench_tp_collectives"};
  app.add_option("--model", a.model, "HF model folder (its config.json gives the shape)")->required();
  app.add_option("--tensor-parallel-size", a.tp, "ranks")->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--batch", batches, "comma-separated sequences per decode step")
      ->capture_default_str();
  app.add_option("--backend", a.backend, "cuda (NCCL) or cpu (the thread stand-in)")
      ->check(CLI::IsMember({"cuda", "cpu"}))->capture_default_str();
  app.add_option("--reps", a.reps, "steps per timing")->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--symmetric", a.symmetric,
                 "1: all-reduce in NCCL symmetric memory (ncclMemAlloc + a symmetric window)")
      ->capture_default_str();
  app.callback([&] {
    a.batches.clear();
    std::stringstream in(batches);
    for (std::string item; std::getline(in, item, ',');) {
      char* end = nullptr;
      const long m = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end || m < 1 || m > 65536)
        throw CLI::ValidationError("--batch", "bad batch size '" + item + "'");
      a.batches.push_back(int(m));
    }
  });
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  prepare_cuda_for_tensor_parallelism(a.tp);  // before any CUDA call
  return cli::run_main("bench_tp_collectives", [&] { return run(a); });
}
