// bench_e2e (bench/e2e_main.cpp) on the CPU backend and a tiny random model: every case prints one
// JSON record with the promised fields, fixed-length runs really produce every token (ignore_eos
// through the Engine), and failures become error records instead of silence.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "weights/random_model.h"

namespace flashserve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kBin = std::string(FS_BINARY_DIR) + "/bench/bench_e2e";

struct CliRun {
  int rc = -1;
  std::vector<json> records;  // stdout's JSON lines
  std::string err;            // stderr
};

CliRun run_cli(const std::string& args, const fs::path& dir) {
  CliRun r;
  const std::string err_file = (dir / "stderr.txt").string();
  FILE* p = popen((kBin + " " + args + " 2> " + err_file).c_str(), "r");
  if (!p) return r;
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) r.records.push_back(json::parse(line));
  std::ifstream e(err_file);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  return r;
}

class BenchE2eCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fs_bench_e2e_cli_" + std::to_string(::getpid()));
    ModelConfig c;
    c.hidden_size = 64, c.intermediate_size = 128, c.num_layers = 2, c.num_q_heads = 4;
    c.num_kv_heads = 2, c.head_dim = 16, c.vocab_size = 512, c.max_model_len = 256;
    write_random_hf_model((dir_ / "model").string(), c, 3, DType::kBF16);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(BenchE2eCli, EveryCaseRunsToLengthAndReports) {
  const CliRun r = run_cli("--model " + (dir_ / "model").string() +
                               " --backend cpu --label tiny --repeats 2 --max-num-seqs 4"
                               " --max-num-batched-tokens 32 --cases decode:1x20x9,offline:6x12x5",
                           dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(r.records.size(), 2u) << r.err;  // no ceilings record on the CPU backend
  const json& d = r.records[0];
  EXPECT_EQ(d["bench"], "e2e_decode");
  EXPECT_EQ(d["model"], "tiny");
  EXPECT_EQ(d["backend"], "cpu");
  EXPECT_EQ(d["prompt_len"], 20);
  EXPECT_EQ(d["output_len"], 9);
  EXPECT_EQ(d["repeats"], 2);
  EXPECT_EQ(d["output_tokens_last_run"], 9);  // EOS never ends a fixed-length run
  EXPECT_EQ(d["all_finished_by_length"], true);
  EXPECT_EQ(d["timed_out"], false);
  EXPECT_GT(d["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_FALSE(d.contains("frac_of_roofline"));  // no ceilings without a GPU
  EXPECT_NE(d["command"].get<std::string>().find("--cases decode:1x20x9"), std::string::npos);
  EXPECT_EQ(d["shape"]["hidden_size"], 64);
  // The warm-up and both repeats send the same prompt: without the cache none of it is reused.
  EXPECT_EQ(d["prefix_caching"], false);
  EXPECT_EQ(d["prompt_tokens_from_cache"], 0);

  const json& o = r.records[1];
  EXPECT_EQ(o["bench"], "e2e_offline");
  EXPECT_EQ(o["num_requests"], 6);
  // 6 requests x 5 tokens with only 4 sequences and 32 tokens per step: the engine must queue.
  EXPECT_EQ(o["output_tokens"], 30);
  EXPECT_EQ(o["all_finished_by_length"], true);
  EXPECT_NEAR(o["output_tokens_per_s"].get<double>() * o["elapsed_s"].get<double>(), 30, 1e-6);
}

TEST_F(BenchE2eCli, PrefixCachingIsOptIn) {
  // With --prefix-caching 1 the repeats reuse the warm-up's prompt blocks (16-token blocks: a
  // 40-token prompt has 2 full ones), which is why the benchmark keeps the cache off by default.
  const CliRun r = run_cli("--model " + (dir_ / "model").string() +
                               " --backend cpu --repeats 2 --prefix-caching 1 --cases decode:1x40x4",
                           dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(r.records.size(), 1u) << r.err;
  EXPECT_EQ(r.records[0]["prefix_caching"], true);
  EXPECT_EQ(r.records[0]["prompt_tokens_from_cache"], 2 * 32) << r.records[0].dump();
}

TEST_F(BenchE2eCli, ConstrainedOverATokenizerOrAStretchedVocabulary) {
  // stories260K's 512-piece tokenizer: as it is for the 512-token model, stretched for a
  // 1000-token one; a stretch that is not the model's vocab_size is an error.
  const std::string tok = std::string(FS_MODELS_DIR) + "/stories260K/tok512.model";
  ModelConfig c;
  c.hidden_size = 64, c.intermediate_size = 128, c.num_layers = 2, c.num_q_heads = 4;
  c.num_kv_heads = 2, c.head_dim = 16, c.vocab_size = 1000, c.max_model_len = 256;
  write_random_hf_model((dir_ / "model1000").string(), c, 3, DType::kBF16);
  for (const auto& [model, stretch] : {std::pair<std::string, std::string>{"model", ""},
                                       {"model1000", " --synthetic-vocab 1000"}}) {
    const CliRun r = run_cli("--model " + (dir_ / model).string() + " --backend cpu --repeats 1" +
                                 " --json-schema realistic --tokenizer " + tok + stretch +
                                 " --cases decode:1x8x6",
                             dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    ASSERT_EQ(r.records.size(), 2u) << r.err;
    EXPECT_EQ(r.records[0]["constraint"], "none");
    const json& k = r.records[1];
    EXPECT_EQ(k["constraint"], "json_schema:realistic");
    EXPECT_EQ(k["constraint_vocab"], stretch.empty() ? "tokenizer" : "synthetic:1000");
    EXPECT_EQ(k["output_tokens_last_run"], 6) << k.dump();
    EXPECT_GT(k["speedup_vs_unconstrained"].get<double>(), 0) << k.dump();
  }
  CliRun r = run_cli("--model " + (dir_ / "model1000").string() + " --backend cpu --json-schema realistic" +
                         " --tokenizer " + tok + " --synthetic-vocab 700 --cases decode:1x8x4",
                     dir_);
  EXPECT_EQ(r.rc, 1);
  ASSERT_EQ(r.records.size(), 1u) << r.err;
  EXPECT_NE(r.records[0]["error"].get<std::string>().find("vocab_size is 1000"), std::string::npos)
      << r.records[0].dump();
  r = run_cli("--model " + (dir_ / "model").string() + " --synthetic-vocab 512", dir_);
  EXPECT_EQ(r.rc, 2) << r.err;  // only with --json-schema
}

TEST_F(BenchE2eCli, FailuresBecomeErrorRecords) {
  // A prompt longer than the context: the case fails, its record says why, the other case runs.
  CliRun r = run_cli("--model " + (dir_ / "model").string() +
                         " --backend cpu --cases offline:2x300x4,decode:1x8x4",
                     dir_);
  EXPECT_EQ(r.rc, 1);
  ASSERT_EQ(r.records.size(), 2u) << r.err;
  EXPECT_EQ(r.records[0]["all_finished_by_length"], false);
  EXPECT_TRUE(r.records[0].contains("error")) << r.records[0].dump();
  // Refused requests are not throughput: no rate field at all (was 0 tokens/s and a huge total).
  for (const char* rate : {"output_tokens_per_s", "total_tokens_per_s", "ttft_s_median"})
    EXPECT_FALSE(r.records[0].contains(rate)) << rate << ": " << r.records[0].dump();
  EXPECT_NE(r.err.find("FAILED"), std::string::npos) << r.err;
  EXPECT_EQ(r.records[1]["all_finished_by_length"], true);
  EXPECT_GT(r.records[1]["decode_tokens_per_s"].get<double>(), 0);
  // A case that runs past --max-seconds is cancelled: an error too, with no rate.
  r = run_cli("--model " + (dir_ / "model").string() +
                  " --backend cpu --max-seconds 0.000001 --cases offline:4x16x200,decode:1x16x200",
              dir_);
  EXPECT_EQ(r.rc, 1) << r.err;
  ASSERT_EQ(r.records.size(), 2u) << r.err;
  for (const json& j : r.records) {
    EXPECT_NE(j["error"].get<std::string>().find("timed out"), std::string::npos) << j.dump();
    EXPECT_FALSE(j.contains("output_tokens_per_s") || j.contains("decode_tokens_per_s")) << j.dump();
  }
  // A model that cannot load: one error record per case. (An unknown --backend is a usage
  // error since the flags moved to cli/cli.h: exit 2 below.)
  r = run_cli("--model " + (dir_ / "no_such_model").string() +
                  " --backend cpu --cases decode:1x8x4,offline:2x8x4",
              dir_);
  EXPECT_EQ(r.rc, 1);
  ASSERT_EQ(r.records.size(), 2u);
  for (const json& j : r.records)
    EXPECT_NE(j["error"].get<std::string>().find("no_such_model"), std::string::npos) << j.dump();
  // Malformed cases and bad values are usage errors (exit 2); --help exits 0.
  r = run_cli("--model " + (dir_ / "model").string() + " --cases decode:4x8x4", dir_);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("bad case"), std::string::npos);
  for (const std::string& bad :
       {"--repeats 0", "--repeats x", "--max-seconds -1", "--nope 1", "--backend nonsense"}) {
    r = run_cli("--model " + (dir_ / "model").string() + " " + bad, dir_);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.err;
  }
  const int help = std::system((kBin + " --help > /dev/null").c_str());
  EXPECT_TRUE(WIFEXITED(help) && WEXITSTATUS(help) == 0) << help;
}

}  // namespace
}  // namespace flashserve
