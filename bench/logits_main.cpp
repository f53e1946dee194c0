// flashserve-logits: runs a batch of token-id prompts through ModelRunner on a chosen backend and
// writes (1) the last-position logits of every prompt as a .npy file (f32 [num_prompts, vocab])
// and (2) greedy continuations of N steps (EOS ignored) as JSON, with each step's top-2 logits.
// tools/hf_compare.py calls it to check flashserve against Hugging Face transformers.
//   flashserve-logits --model DIR --prompts FILE.json --out-logits F.npy --out-json F.json
//                     [--backend cpu|cuda|auto] [--steps 64] [--prefill-chunk 0] [--threads 0]
//                     [--quantize none|fp8] [--out-all-logits F.npy]
// FILE.json: {"prompts": [[1, 450, ...], ...]} (a plain list of lists is accepted too).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/error.h"
#include "model/model_runner.h"
#include "weights/loaded_model.h"

using namespace flashserve;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model, prompts, out_logits, out_json, backend = "cpu", quantize = "none";
  std::string out_all_logits;  // every prompt position's logits (teacher-forced), or ""
  int steps = 64, prefill_chunk = 0, threads = 0;
};

// Parses the command line (cli/cli.h conventions); exits 0 after --help, 2 on a usage error.
Args parse_args(int argc, char** argv) {
  Args a;
  CLI::App app{"Last-position logits and greedy continuations of given prompts (for tools/hf_compare.py).",
               "flashserve-logits"};
  app.add_option("--model", a.model, "model folder or .bin")->required();
  app.add_option("--prompts", a.prompts, "{\"prompts\": [[ids...], ...]} (BOS included by the caller)")
      ->required();
  app.add_option("--out-logits", a.out_logits, "F.npy")->required();
  app.add_option("--out-json", a.out_json, "F.json")->required();
  app.add_option("--backend", a.backend)->check(CLI::IsMember({"cpu", "cuda", "auto"}))->capture_default_str();
  cli::add_quantize_flag(app, a.quantize);
  app.add_option("--out-all-logits", a.out_all_logits,
                 "F.npy: the logits of every prompt position, prompts one after another\n"
                 "([total prompt tokens, vocab]; teacher-forced quality checks, bench/fp8_quality.py)");
  app.add_option("--steps", a.steps, "greedy tokens generated per prompt, EOS ignored")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--prefill-chunk", a.prefill_chunk, "split prompts into chunks of this many tokens (0 = whole prompt)")
      ->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--threads", a.threads, "CPU threads, 0 = all cores")->check(CLI::Range(0, 1024))
      ->capture_default_str();
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) std::exit(rc);
  return a;
}

std::vector<std::vector<int32_t>> read_prompts(const std::string& path) {
  std::ifstream in(path);
  FS_CHECK(bool(in), path, ": cannot open");
  json j = json::parse(in);
  if (j.is_object()) j = j.at("prompts");
  FS_CHECK(j.is_array() && !j.empty(), path, ": want a non-empty list of prompts");
  std::vector<std::vector<int32_t>> prompts;
  for (const json& p : j) {
    FS_CHECK(p.is_array() && !p.empty(), path, ": every prompt must be a non-empty id list");
    prompts.push_back(p.get<std::vector<int32_t>>());
  }
  return prompts;
}

// NumPy .npy v1.0: magic, header length, a Python-dict header padded to 64 bytes, raw data.
void write_npy_f32(const std::string& path, const std::vector<float>& data, size_t rows,
                   size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  FS_CHECK(bool(out), path, ": cannot create");
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = uint16_t(header.size());
  const char len_le[2] = {char(len & 0xff), char(len >> 8)};
  out.write(len_le, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()),
            std::streamsize(data.size() * sizeof(float)));
  FS_CHECK(bool(out), path, ": write failed");
}

// Index and value of the largest and second-largest logit; ties go to the lower index, like
// torch.argmax.
struct Top2 {
  int32_t id1 = 0, id2 = 0;
  float v1 = 0, v2 = 0;
};
Top2 top2(const float* row, int vocab) {  // row: [vocab_size]
  Top2 t;
  t.id1 = 0, t.v1 = row[0], t.id2 = -1, t.v2 = -INFINITY;
  for (int i = 1; i < vocab; ++i) {
    if (row[i] > t.v1)
      t.id2 = t.id1, t.v2 = t.v1, t.id1 = i, t.v1 = row[i];
    else if (row[i] > t.v2)
      t.id2 = i, t.v2 = row[i];
  }
  return t;
}

int run(const Args& a) {
  auto prompts = read_prompts(a.prompts);
  auto model = load_model(a.model, LoadOptions{.quantize = parse_quantize(a.quantize)});
  const ModelConfig& c = model->config();
  const int vocab = c.vocab_size, n = int(prompts.size());

  // Each sequence gets its own contiguous run of blocks, sized for prompt + steps.
  ModelRunnerOptions o;
  o.backend = a.backend;
  o.threads = a.threads;
  const int bs = o.block_size;
  std::vector<std::vector<int32_t>> tables(n);
  int next_block = 0;
  for (int s = 0; s < n; ++s) {
    const int len = int(prompts[s].size()) + a.steps;
    FS_CHECK(len <= c.max_model_len, "prompt ", s, " + steps = ", len,
             " exceeds max_position_embeddings ", c.max_model_len);
    for (int b = 0; b < (len + bs - 1) / bs; ++b) tables[s].push_back(next_block++);
  }
  o.kv_cache_tokens = int64_t(next_block) * bs;
  const auto t_load = Clock::now();
  auto runner = ModelRunner::create(*model, o);
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  // Prefill, chunked when asked (every chunk of every prompt shares one step, as in the engine).
  std::vector<int> cached(n, 0);
  std::vector<float> last_logits(size_t(n) * vocab), step_logits;
  std::vector<std::vector<float>> all_logits(n);  // --out-all-logits: [prompt length, vocab] each
  const auto t0 = Clock::now();
  int prefill_steps = 0;
  for (bool pending = true; pending;) {
    StepPlan batch;
    std::vector<int> ids;
    for (int s = 0; s < n; ++s) {
      const int left = int(prompts[s].size()) - cached[s];
      if (left <= 0) continue;
      StepChunk ch;
      ch.num_tokens = a.prefill_chunk > 0 ? std::min(left, a.prefill_chunk) : left;
      ch.tokens = prompts[s].data() + cached[s];
      ch.num_cached = cached[s];
      ch.block_table = &tables[s];
      ch.logits = !a.out_all_logits.empty()  ? LogitsWanted::kAll
                  : ch.num_tokens == left ? LogitsWanted::kLast
                                          : LogitsWanted::kNone;
      batch.chunks.push_back(ch);
      ids.push_back(s);
    }
    pending = !batch.chunks.empty();
    if (!pending) break;
    step_logits.clear();
    runner->step(batch, &step_logits);
    ++prefill_steps;
    size_t row = 0;
    for (size_t k = 0; k < ids.size(); ++k) {
      const int s = ids[k], tokens = batch.chunks[k].num_tokens;
      cached[s] += tokens;
      if (batch.chunks[k].logits == LogitsWanted::kNone) continue;
      const size_t rows = batch.chunks[k].logits == LogitsWanted::kAll ? size_t(tokens) : 1;
      const float* first = step_logits.data() + row * vocab;
      if (batch.chunks[k].logits == LogitsWanted::kAll)
        all_logits[s].insert(all_logits[s].end(), first, first + rows * vocab);
      if (cached[s] == int(prompts[s].size()))  // the prompt's last position
        std::copy_n(first + (rows - 1) * vocab, vocab, last_logits.data() + size_t(s) * vocab);
      row += rows;
    }
    FS_CHECK(row * vocab == step_logits.size(), "runner returned ", step_logits.size() / vocab,
             " logit rows, expected ", row);
  }
  const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // Greedy decode, all sequences in one step each.
  std::vector<std::vector<int32_t>> cont(n);
  std::vector<std::vector<std::vector<double>>> tops(n);  // per step [id1, v1, id2, v2]
  std::vector<int32_t> next(n);
  auto take = [&](int s, const float* row) {
    const Top2 t = top2(row, vocab);
    next[s] = t.id1;
    cont[s].push_back(t.id1);
    tops[s].push_back({double(t.id1), double(t.v1), double(t.id2), double(t.v2)});
  };
  for (int s = 0; s < n && a.steps > 0; ++s) take(s, last_logits.data() + size_t(s) * vocab);
  const auto t1 = Clock::now();
  for (int step = 1; step < a.steps; ++step) {
    StepPlan batch;
    for (int s = 0; s < n; ++s) {
      StepChunk ch;
      ch.tokens = &next[s];
      ch.num_tokens = 1;
      ch.num_cached = cached[s];
      ch.block_table = &tables[s];
      batch.chunks.push_back(ch);
    }
    step_logits.clear();
    runner->step(batch, &step_logits);
    FS_CHECK(step_logits.size() == size_t(n) * vocab, "decode step returned ", step_logits.size(),
             " floats, expected ", size_t(n) * vocab);
    for (int s = 0; s < n; ++s) ++cached[s], take(s, step_logits.data() + size_t(s) * vocab);
  }
  const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();

  write_npy_f32(a.out_logits, last_logits, size_t(n), size_t(vocab));
  if (!a.out_all_logits.empty()) {
    std::vector<float> all;
    for (const auto& p : all_logits) all.insert(all.end(), p.begin(), p.end());
    write_npy_f32(a.out_all_logits, all, all.size() / size_t(vocab), size_t(vocab));
  }
  json out = {{"backend", runner->backend_name()},
              {"model", a.model},
              {"quantize", a.quantize},
              {"num_prompts", n},
              {"vocab_size", vocab},
              {"steps", a.steps},
              {"prefill_chunk", a.prefill_chunk},
              {"prefill_steps", prefill_steps},
              {"load_s", load_s},
              {"prefill_s", prefill_s},
              {"decode_s", decode_s},
              {"continuations", cont},
              {"top2", tops}};
  std::ofstream f(a.out_json);
  f << out.dump() << "\n";
  FS_CHECK(bool(f), a.out_json, ": write failed");
  std::fprintf(stderr,
               "flashserve-logits: %d prompts on %s: load %.2f s, prefill %.3f s (%d steps), "
               "%d decode steps %.3f s\n",
               n, runner->backend_name().c_str(), load_s, prefill_s, prefill_steps,
               std::max(0, a.steps - 1), decode_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  return cli::run_main("flashserve-logits", [&] { return run(args); });
}
