// bench_server: a load generator for a running flashserve (or any OpenAI-compatible completions
// server). It keeps `concurrency` streaming requests in flight until `num-requests` are done and
// prints one JSON line per concurrency level: requests/s, output tokens/s, TTFT / TPOT / latency
// p50 and p99 (client-side), errors and 429/503 rejections, and the CPU/GPU it ran on. With
// --request-rate it is an open loop instead: requests arrive as a Poisson process at each given
// rate, however slowly the server answers, and the record adds the goodput, the requests per
// second that met the SLO (--slo-ttft-ms and --slo-tpot-ms), which is what an online service sees.
// Prompts are token-id lists of a fixed length and outputs run to max_tokens (ignore_eos), so
// runs are comparable.
// Workloads (--workload): random (each prompt its own random ids); shared_prefix (every prompt is
// one common --prefix-len prefix, a system prompt, then its own --prompt-len question); multi_turn
// (`concurrency` conversations of --turns turns: turn 1 sends --prompt-len tokens, each later turn
// resends the whole previous prompt plus --turn-tokens new ones, standing for the reply and the
// next user message; one record per turn). The last two measure the prefix cache: run them
// against a server with and without --no-prefix-caching (bench/gpu.sh bench prefix does both).
// The reply is stood for by fixed ids rather than the generated ones (the API returns text, not
// ids), so the reply's own cached blocks are never reused here: real chats hit a bit more.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/record.h"
#include "cli/cli.h"
#include "tests/common/http_client.h"

using json = nlohmann::json;
namespace http = flashserve::http;
using Clock = std::chrono::steady_clock;
using flashserve::bench::percentile;

namespace {

struct Args {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<int> concurrency = {1, 8, 32};
  int num_requests = 200;
  int prompt_len = 64;
  int max_tokens = 128;
  int token_lo = 259, token_hi = 459;  // prompt ids drawn from [lo, hi): common pieces
  std::string api_key;
  std::string label;
  std::string server_command;  // recorded with the results: how the server was started
  std::string weights;         // recorded as "weights": the served model's format (the API hides it)
  std::string workload = "random";  // random | shared_prefix | multi_turn
  int prefix_len = 1024;            // shared_prefix: the common prefix (BOS included)
  int turns = 8, turn_tokens = 512;  // multi_turn
  uint32_t seed = 1000;  // shared_prefix / multi_turn: worker w draws its ids from seed + w
  std::vector<double> request_rates;        // open loop: Poisson arrivals per second
  double slo_ttft_ms = 1000, slo_tpot_ms = 50;  // a request within both counts as goodput
};

// Parses the command line (cli/cli.h conventions); exits 0 after --help, 2 on a usage error.
Args parse_args(int argc, char** argv) {
  Args a;
  std::vector<int> token_range;
  CLI::App app{"Load generator for a running flashserve: streaming completions at given concurrencies.",
               "bench_server"};
  app.add_option("--host", a.host)->capture_default_str();
  app.add_option("--port", a.port)->check(CLI::Range(1, 65535))->capture_default_str();
  app.add_option("--concurrency", a.concurrency, "comma-separated client counts")->delimiter(',')
      ->check(CLI::Range(1, 100000));
  app.add_option("--num-requests", a.num_requests)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--prompt-len", a.prompt_len)->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--max-tokens", a.max_tokens)->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--token-range", token_range, "LO,HI: prompt ids drawn from [LO, HI) (default 259,459)")
      ->delimiter(',')->expected(2)->check(CLI::NonNegativeNumber);
  app.add_option("--api-key", a.api_key);
  app.add_option("--label", a.label);
  app.add_option("--server-command", a.server_command, "recorded in the output");
  app.add_option("--weights", a.weights, "the served weights' format, recorded (bf16, fp8, int4-gptq, ...)");
  app.add_option("--workload", a.workload, "random | shared_prefix (one common prefix) | multi_turn (resent histories)")
      ->check(CLI::IsMember({"random", "shared_prefix", "multi_turn"}))->capture_default_str();
  app.add_option("--prefix-len", a.prefix_len, "shared_prefix: tokens every prompt starts with")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--turns", a.turns, "multi_turn: turns per conversation")->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--turn-tokens", a.turn_tokens, "multi_turn: tokens each turn adds")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  app.add_option("--seed", a.seed, "shared_prefix, multi_turn: worker w draws its prompt ids from "
                 "seed + w (another seed: other questions and conversations, the same system prompt)")
      ->capture_default_str();
  app.add_option("--request-rate", a.request_rates,
                 "comma-separated arrival rates (requests/s): an open loop of --num-requests random "
                 "prompts per rate instead of --concurrency")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--slo-ttft-ms", a.slo_ttft_ms, "open loop: the SLO's time to first token")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--slo-tpot-ms", a.slo_tpot_ms, "open loop: the SLO's time per output token")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  if (const int rc = flashserve::cli::parse(app, argc, argv); rc >= 0) std::exit(rc);
  if (!a.request_rates.empty() && a.workload != "random")
    std::exit(flashserve::cli::usage_error(app, "--request-rate runs the random workload only"));
  if (!token_range.empty()) {
    if (token_range[0] >= token_range[1]) std::exit(flashserve::cli::usage_error(app, "--token-range: LO must be below HI"));
    a.token_lo = token_range[0], a.token_hi = token_range[1];
  }
  return a;
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string gpu_name() {
  FILE* p = popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1", "r");
  if (!p) return "none";
  char buf[256] = {0};
  std::string s = fgets(buf, sizeof buf, p) ? buf : "";
  pclose(p);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "none" : s;
}

struct Sample {
  bool ok = false, rejected = false;
  double ttft_s = 0, e2e_s = 0, tpot_s = -1;
  int output_tokens = 0;
  int prompt_tokens = 0, cached_tokens = 0;  // from usage
};

// Appends n random ids from the token range.
void add_random_tokens(const Args& a, int n, std::mt19937& rng, json* prompt) {
  std::uniform_int_distribution<int> tok(a.token_lo, a.token_hi - 1);
  for (int i = 0; i < n; ++i) prompt->push_back(tok(rng));
}

Sample one_request(const Args& a, const std::string& model, const json& prompt) {
  json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", a.max_tokens},
               {"temperature", 0}, {"ignore_eos", true}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  std::vector<std::string> headers;
  if (!a.api_key.empty()) headers.push_back("Authorization: Bearer " + a.api_key);
  Sample s;
  const auto t0 = Clock::now();
  Clock::time_point first{}, last{};
  bool got_first = false;
  http::Connection c;
  if (!c.connect(a.host, a.port, 600) ||
      !c.send_request("POST", "/v1/completions", body.dump(), headers)) {
    return s;
  }
  http::Response r = c.read_response([&](std::string_view piece) {
    if (!got_first && piece.find("\"text\"") != std::string_view::npos) {
      first = Clock::now();
      got_first = true;
    }
    if (piece.find("\"text\"") != std::string_view::npos) last = Clock::now();
    return true;
  });
  const auto t1 = Clock::now();
  if (r.status == 429 || r.status == 503) {
    s.rejected = true;
    return s;
  }
  if (r.status != 200 || r.body.find("data: [DONE]") == std::string::npos) return s;
  for (const auto& d : http::sse_data(r.body)) {
    if (d == "[DONE]") continue;
    json j = json::parse(d, nullptr, false);
    if (j.is_object() && j.contains("usage")) {
      const json& u = j["usage"];
      s.output_tokens = u["completion_tokens"];
      s.prompt_tokens = u["prompt_tokens"];
      s.cached_tokens = u.value("/prompt_tokens_details/cached_tokens"_json_pointer, 0);
    }
  }
  s.ok = got_first;
  s.ttft_s = std::chrono::duration<double>(first - t0).count();
  s.e2e_s = std::chrono::duration<double>(t1 - t0).count();
  if (s.output_tokens > 1) {
    s.tpot_s = std::chrono::duration<double>(last - first).count() / (s.output_tokens - 1);
  }
  return s;
}

// Runs `concurrency` workers until every sample is done; returns the wall time. Worker w calls
// `work(w, rng)`. `fresh` seeds the workers' generators anew each run (the random workload: a
// prompt seen by an earlier level or run would hit the server's prefix cache); otherwise worker
// w draws from seed + w (a run with and one without the cache send the same requests).
template <typename F>
double run_workers(int concurrency, bool fresh, uint32_t seed, F work) {
  const auto t0 = Clock::now();
  const uint32_t base = fresh ? std::random_device{}() : seed;
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937 rng(base + static_cast<uint32_t>(w));
      work(w, rng);
    });
  }
  for (auto& t : workers) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The summary of `samples` as one JSON record.
json summarize(const std::vector<Sample>& samples, double wall) {
  std::vector<double> ttft, tpot, e2e;
  int ok = 0, rejected = 0, errors = 0;
  long tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  for (const auto& s : samples) {
    if (s.rejected) ++rejected;
    if (!s.ok) {
      errors += s.rejected ? 0 : 1;
      continue;
    }
    ++ok;
    tokens += s.output_tokens;
    prompt_tokens += s.prompt_tokens;
    cached_tokens += s.cached_tokens;
    ttft.push_back(s.ttft_s * 1e3);
    e2e.push_back(s.e2e_s * 1e3);
    if (s.tpot_s >= 0) tpot.push_back(s.tpot_s * 1e3);
  }
  return {{"num_requests", samples.size()},
          {"ok", ok},
          {"rejected_429_503", rejected},
          {"errors", errors},
          {"wall_s", wall},
          {"requests_per_s", ok / wall},
          {"output_tokens_per_s", tokens / wall},
          {"prompt_tokens", prompt_tokens},
          {"cached_tokens", cached_tokens},
          {"ttft_ms_p50", percentile(ttft, 0.5)},
          {"ttft_ms_p99", percentile(ttft, 0.99)},
          {"tpot_ms_p50", percentile(tpot, 0.5)},
          {"tpot_ms_p99", percentile(tpot, 0.99)},
          {"e2e_ms_p50", percentile(e2e, 0.5)},
          {"e2e_ms_p99", percentile(e2e, 0.99)}};
}

// The open loop at `rate`: request i is sent at the i-th arrival of a Poisson process (its own
// thread, so a slow answer never delays the next arrival); returns the wall time until the last
// answer. Prompts are fresh random ids (no prefix-cache hits).
double run_open_loop(const Args& a, const std::string& model, double rate, std::vector<Sample>& samples) {
  std::mt19937 rng(std::random_device{}());
  std::exponential_distribution<double> gap(rate);
  std::vector<std::thread> requests;
  const auto t0 = Clock::now();
  auto at = t0;
  for (size_t i = 0; i < samples.size(); ++i) {
    json prompt = json::array({1});
    add_random_tokens(a, a.prompt_len - 1, rng, &prompt);
    std::this_thread::sleep_until(at);
    requests.emplace_back([&, i, prompt = std::move(prompt)] { samples[i] = one_request(a, model, prompt); });
    at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
  }
  for (auto& t : requests) t.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The requests per second that met the SLO, and their share of all sent.
void add_goodput(const Args& a, const std::vector<Sample>& samples, double wall, json* rec) {
  int good = 0;
  for (const auto& s : samples)
    good += s.ok && s.ttft_s * 1e3 <= a.slo_ttft_ms && s.tpot_s * 1e3 <= a.slo_tpot_ms;
  (*rec)["slo_ttft_ms"] = a.slo_ttft_ms;
  (*rec)["slo_tpot_ms"] = a.slo_tpot_ms;
  (*rec)["goodput_requests_per_s"] = good / wall;
  (*rec)["frac_within_slo"] = double(good) / double(samples.size());
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  const std::string command = flashserve::cli::command_line(argc, argv);

  std::vector<std::string> headers;
  if (!a.api_key.empty()) headers.push_back("Authorization: Bearer " + a.api_key);
  http::Response models = http::request(a.port, "GET", "/v1/models", "", headers);
  json mj = json::parse(models.body, nullptr, false);
  if (models.status != 200 || !mj.is_object()) {
    std::fprintf(stderr, "bench_server: GET /v1/models on port %d failed (status %d)\n", a.port,
                 models.status);
    return 1;
  }
  const std::string model = mj["data"][0]["id"];
  const std::string cpu = cpu_name(), gpu = gpu_name();
  auto emit = [&](json rec, int concurrency) {
    rec["bench"] = "server";
    rec["workload"] = a.workload;
    rec["model"] = model;
    if (concurrency > 0) rec["concurrency"] = concurrency;  // 0: the open loop
    rec["max_tokens"] = a.max_tokens;
    if (a.workload != "random") rec["seed"] = a.seed;
    rec["cpu"] = cpu;
    rec["gpu"] = gpu;
    rec["command"] = command;
    if (!a.label.empty()) rec["label"] = a.label;
    if (!a.server_command.empty()) rec["server_command"] = a.server_command;
    if (!a.weights.empty()) rec["weights"] = a.weights;
    std::printf("%s\n", rec.dump().c_str());
    std::fflush(stdout);
  };

  json shared = json::array({1});  // the common prefix: the same for every worker and run
  {
    std::mt19937 rng(7);
    add_random_tokens(a, a.prefix_len - 1, rng, &shared);
  }
  for (double rate : a.request_rates) {
    std::vector<Sample> samples(static_cast<size_t>(a.num_requests));
    const double wall = run_open_loop(a, model, rate, samples);
    json rec = summarize(samples, wall);
    rec["request_rate"] = rate;
    rec["prompt_len"] = a.prompt_len;
    add_goodput(a, samples, wall, &rec);
    emit(rec, 0);
  }
  for (int concurrency : a.request_rates.empty() ? a.concurrency : std::vector<int>{}) {
    if (a.workload == "multi_turn") {
      // samples[turn][conversation]
      std::vector<std::vector<Sample>> samples(a.turns, std::vector<Sample>(concurrency));
      const double wall = run_workers(concurrency, false, a.seed, [&](int w, std::mt19937& rng) {
        json history = json::array({1});
        add_random_tokens(a, a.prompt_len - 1, rng, &history);
        for (int t = 0; t < a.turns; ++t) {
          if (t > 0) add_random_tokens(a, a.turn_tokens, rng, &history);
          samples[t][w] = one_request(a, model, history);
        }
      });
      std::vector<Sample> all;
      for (int t = 0; t < a.turns; ++t) {
        json rec = summarize(samples[t], wall);
        rec.erase("requests_per_s");  // rates over the whole run's wall time: only in "all"
        rec.erase("output_tokens_per_s");
        rec["turn"] = t + 1;
        rec["prompt_len"] = a.prompt_len + t * a.turn_tokens;
        emit(rec, concurrency);
        all.insert(all.end(), samples[t].begin(), samples[t].end());
      }
      json rec = summarize(all, wall);
      rec["turn"] = "all";
      rec["turns"] = a.turns;
      rec["turn_tokens"] = a.turn_tokens;
      rec["prompt_len"] = a.prompt_len;
      emit(rec, concurrency);
      continue;
    }
    std::vector<Sample> samples(static_cast<size_t>(a.num_requests));
    std::atomic<int> next{0};
    const double wall = run_workers(concurrency, a.workload == "random", a.seed, [&](int, std::mt19937& rng) {
      for (int i = next++; i < a.num_requests; i = next++) {
        json prompt = a.workload == "shared_prefix" ? shared : json::array({1});
        add_random_tokens(a, a.workload == "shared_prefix" ? a.prompt_len : a.prompt_len - 1, rng,
                          &prompt);
        samples[i] = one_request(a, model, prompt);
      }
    });
    json rec = summarize(samples, wall);
    rec["prompt_len"] = a.workload == "shared_prefix" ? a.prefix_len + a.prompt_len : a.prompt_len;
    if (a.workload == "shared_prefix") rec["prefix_len"] = a.prefix_len;
    emit(rec, concurrency);
  }
  return 0;
}
