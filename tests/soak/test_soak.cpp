// Soak test (label soak): the real `flashserve` binary (stories260K, CPU backend by default) on
// loopback under FS_SOAK_REQUESTS random requests (default 3000) from FS_SOAK_CONCURRENCY clients
// (default 32): completions with random parameters, streamed or not; bad requests; GETs; fixed
// probes whose text must equal the idle answer; ~10% hang-ups mid-request or mid-response. A
// small KV cache makes preemption happen. At the end: every request accounted for (none lost),
// zero KV blocks in use, nothing running or waiting, /metrics consistent with what the clients
// saw, RSS growth under FS_SOAK_RSS_MARGIN_MIB (default 8) between two idle points (after half
// of the requests and after all of them), clean exit 0.
// FS_SOAK_SERVER_ARGS adds flags (e.g. "--backend cuda"); FS_SOAK_REPORT appends a JSON line.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "tests/server/server_process.h"
#include "tests/soak/soak_client.h"

namespace flashserve::testing {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

std::vector<std::string> split_args(const char* s) {
  std::vector<std::string> out;
  std::istringstream in(s ? s : "");
  for (std::string a; in >> a;) out.push_back(a);
  return out;
}

// Every sample of the /metrics page: "name{labels}" -> value.
std::map<std::string, double> scrape(int port) {
  std::map<std::string, double> out;
  std::istringstream in(http::request(port, "GET", "/metrics").body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    if (sp != std::string::npos) out[line.substr(0, sp)] = std::atof(line.c_str() + sp + 1);
  }
  return out;
}

TEST(Soak, RandomLoadWithHangUpsLeavesNothingBehind) {
  const int64_t total = env_int("FS_SOAK_REQUESTS", 3000);
  const int concurrency = int(env_int("FS_SOAK_CONCURRENCY", 32));
  const long margin_kib = long(env_int("FS_SOAK_RSS_MARGIN_MIB", 8)) * 1024;
  std::vector<std::string> args = {"--max-num-seqs", "16", "--max-queue", "40",
                                   "--kv-cache-tokens", "2048", "--no-request-log"};
  for (auto& a : split_args(std::getenv("FS_SOAK_SERVER_ARGS"))) args.push_back(a);
  ServerProcess server(args);
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();

  // Probes: their idle answers first.
  std::vector<soak::Probe> probes = {
      {R"({"prompt":"Once upon a time","max_tokens":64,"temperature":0})", ""},
      {R"({"prompt":"The dog","max_tokens":48,"temperature":1.0,"top_p":0.9,"seed":1234})", ""},
      {R"({"prompt":[1,403,407,261],"max_tokens":100,"temperature":0.8,"seed":7,"ignore_eos":true,
          "presence_penalty":0.5})", ""},
      // Long enough (5+ KV blocks) to be served from the prefix cache under load, where its
      // blocks may also be evicted and recomputed: the text must not change.
      {R"({"prompt":"Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her big red ball and her small brown dog. One day, she saw","max_tokens":40,"temperature":0})", ""}};
  for (auto& p : probes) ASSERT_TRUE(soak::completion_text(port, p.body, &p.expected)) << p.body;

  soak::Tally t;
  t.probes_exact = env_int("FS_SOAK_PROBES_EXACT", 1) != 0;
  std::atomic<int64_t> next{0};
  std::atomic<bool> running{true};
  long rss_start = server.rss_kib(), rss_max = rss_start;
  int64_t metrics_polls = 0;
  // Samples the peak RSS under load.
  std::thread sampler([&] {
    while (running) {
      rss_max = std::max(rss_max, server.rss_kib());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  // Runs the clients until `upto` requests have been sent (the second run's clients draw other
  // random streams).
  auto run_clients = [&](int64_t upto, uint64_t first_seed) {
    std::vector<std::thread> clients;
    for (int c = 0; c < concurrency; ++c) {
      clients.emplace_back(soak::run_client, port, first_seed + c, &next, upto, std::cref(probes), &t);
    }
    for (auto& c : clients) c.join();
  };
  // Quiet: blocks return within 2 s of the last client; then half a second more, so that RSS is
  // read with the server idle (the engine gives free heap back after 200 ms of idleness).
  auto quiet = [&] {
    std::map<std::string, double> scraped;
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    do {
      scraped = scrape(port);
      ++metrics_polls;
    } while (scraped["flashserve_kv_blocks_used"] != 0 && Clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return scraped;
  };
  // Memory is compared at two idle points: after the first half of the requests (allocator
  // arenas of the handler threads have filled up by then) and after all of them.
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  auto t0 = Clock::now();
  run_clients(total / 2, 1);
  double seconds = seconds_since(t0);  // the clients' time, not the quiet pauses
  quiet();
  const long rss_warm = server.rss_kib();
  next = total / 2;  // each client's last draw went past the first half's end
  t0 = Clock::now();
  run_clients(total, 1 + uint64_t(concurrency));
  seconds += seconds_since(t0);
  ASSERT_TRUE(server.alive()) << server.log().substr(0, 4000);
  std::map<std::string, double> m = quiet();
  const long rss_end = server.rss_kib();
  running = false;
  sampler.join();

  // Every request accounted for.
  for (const auto& f : t.failures) ADD_FAILURE() << f;
  EXPECT_EQ(t.lost, 0);
  EXPECT_EQ(t.sent, total);
  EXPECT_EQ(t.ok + t.rejected + t.bad_expected + t.other_ok + t.hung_up_request +
                t.hung_up_response, total);
  EXPECT_GT(t.ok, total / 2) << "too few completions to mean anything";
  EXPECT_GT(t.hung_up_request + t.hung_up_response, total / 20);
  EXPECT_GT(t.probes_ok, 0);

  // Nothing left behind.
  EXPECT_EQ(m["flashserve_kv_blocks_used"], 0);
  // Block accounting with the prefix cache (on by default): used + free + cached = total.
  EXPECT_EQ(m["flashserve_kv_blocks_used"] + m["flashserve_kv_blocks_free"] +
                m["flashserve_prefix_cache_blocks"],
            m["flashserve_kv_blocks_total"]);
  EXPECT_EQ(m["flashserve_requests_running"], 0);
  EXPECT_EQ(m["flashserve_requests_waiting"], 0);
  // /metrics agrees with the clients. 404 is exact (bad requests are never hung up on); 400 also
  // counts requests cut off mid-way (httplib answers those 400 into a closed socket); 200 and
  // 503 may include requests hung up on while answered (and 200 our own /metrics polls).
  auto status = [&](int s) { return m["flashserve_http_requests_total{status=\"" + std::to_string(s) + "\"}"]; };
  EXPECT_GE(status(400), double(t.status_400));
  EXPECT_LE(status(400), double(t.status_400 + t.hung_up_request));
  EXPECT_EQ(status(404), double(t.status_404));
  EXPECT_GE(status(503), double(t.rejected));
  EXPECT_LE(status(503), double(t.rejected + t.hung_up_response));
  EXPECT_GE(status(200), double(t.ok + t.other_ok + 3 /*probes' idle answers*/));
  EXPECT_LE(status(200), double(t.ok + t.other_ok + 3 + t.hung_up_response + metrics_polls));
  EXPECT_LE(m["flashserve_client_disconnects_total"], double(t.hung_up_response));
  EXPECT_GE(m["flashserve_engine_requests_finished_total"], double(t.ok_choices));
  EXPECT_GE(m["flashserve_generation_tokens_total"], double(t.usage_completion));
  EXPECT_GE(m["flashserve_prompt_tokens_total"], double(t.usage_prompt));
  EXPECT_GE(m["flashserve_e2e_request_latency_seconds_count"], double(t.ok));

  // Memory flat: idle RSS after all the requests against idle RSS after half of them.
  EXPECT_LT(rss_end - rss_warm, margin_kib)
      << "RSS start " << rss_start << " warm " << rss_warm << " end " << rss_end << " KiB";

  const int exit_code = server.stop();
  EXPECT_EQ(exit_code, 0) << server.log().substr(0, 4000);

  json report = {
      {"test", "soak"}, {"requests", total}, {"concurrency", concurrency}, {"seconds", seconds},
      {"server_args", args}, {"ok", t.ok.load()}, {"ok_choices", t.ok_choices.load()},
      {"rejected_503", t.rejected.load()}, {"bad_requests", t.bad_expected.load()},
      {"gets", t.other_ok.load()}, {"hung_up_request", t.hung_up_request.load()},
      {"hung_up_response", t.hung_up_response.load()}, {"probes_ok", t.probes_ok.load()},
      {"probes_differ", t.probes_differ.load()}, {"probes_exact", t.probes_exact},
      {"lost", t.lost.load()}, {"preemptions", m["flashserve_preemptions_total"]},
      {"generation_tokens", m["flashserve_generation_tokens_total"]},
      {"client_disconnects", m["flashserve_client_disconnects_total"]},
      {"kv_blocks_used_end", m["flashserve_kv_blocks_used"]}, {"rss_start_kib", rss_start},
      {"prefix_cache_hits_tokens", m["flashserve_prefix_cache_hits_tokens_total"]},
      {"prefix_cache_queries_tokens", m["flashserve_prefix_cache_queries_tokens_total"]},
      {"prefix_cache_evictions", m["flashserve_prefix_cache_evictions_total"]},
      {"rss_warm_kib", rss_warm}, {"rss_end_kib", rss_end}, {"rss_max_kib", rss_max},
      {"rss_growth_after_warmup_kib", rss_end - rss_warm},
      {"rss_points", "idle after half of the requests (warm), idle after all (end)"},
      {"exit_code", exit_code}};
  std::printf("%s\n", report.dump().c_str());
  if (const char* path = std::getenv("FS_SOAK_REPORT")) {
    std::ofstream(path, std::ios::app) << report.dump() << "\n";
  }
}

}  // namespace
}  // namespace flashserve::testing
