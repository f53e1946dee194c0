// flashserve-logits (bench/logits_main.cpp), the program tools/hf_compare.py reads flashserve's
// answers from: its .npy logits and greedy continuations against the independent float64 numpy
// forward (tools/llama_reference.py, through /usr/bin/python3; skipped without numpy), chunked
// prefill against whole-prompt prefill, and its errors on bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

const std::string kBin = std::string(FS_BINARY_DIR) + "/bench/flashserve-logits";
// fp32 C++ against float64 numpy over 2 layers of width 128: errors are ~1e-7 relative; 1e-9
// NMSE still catches any real mistake (a wrong row or RoPE position moves NMSE above 1e-3).
constexpr double kMaxNmse = 1e-9;

struct CliRun {
  int rc = -1;
  std::string output;
};

CliRun run_cli(const std::string& args) {
  CliRun r;
  FILE* p = popen((kBin + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Reads an f32 .npy of shape (rows, cols) as written by flashserve-logits.
std::vector<float> read_npy(const std::string& path, size_t* rows, size_t* cols) {
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GE(all.size(), 10u);
  EXPECT_EQ(all.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)), 0);
  const size_t hlen = uint8_t(all[8]) | (size_t(uint8_t(all[9])) << 8);
  EXPECT_EQ((10 + hlen) % 64, 0u) << "npy header must pad the data to 64 bytes";
  const std::string header = all.substr(10, hlen);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_EQ(std::sscanf(header.c_str() + header.find("'shape': (") + 10, "%zu, %zu", rows, cols), 2)
      << header;
  std::vector<float> v((all.size() - 10 - hlen) / 4);
  std::memcpy(v.data(), all.data() + 10 + hlen, v.size() * 4);
  EXPECT_EQ(v.size(), *rows * *cols);
  return v;
}

class LogitsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("fs_logits_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ModelConfig c;
    c.hidden_size = 128, c.intermediate_size = 256, c.num_layers = 2, c.num_q_heads = 4;
    c.num_kv_heads = 2, c.head_dim = 32, c.vocab_size = 300, c.max_model_len = 256;
    c.rope_theta = 500000.f;  // llama3-scaled RoPE and a tied head, like the Llama-3.2 shape
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 8.f;
    c.rope_scaling.original_max_position_embeddings = 64;
    c.tie_word_embeddings = true;
    write_random_hf_model((dir_ / "model").string(), c, 7, DType::kBF16, 1, 0.05f);
    prompts_ = {{1, 17, 250, 3, 99, 42, 8}, {1}, {1,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                                  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 150}};
    std::ofstream(dir_ / "prompts.json") << json{{"prompts", prompts_}}.dump();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string args(const std::string& tag, const std::string& extra = "") const {
    return "--model " + (dir_ / "model").string() + " --prompts " +
           (dir_ / "prompts.json").string() + " --out-logits " + (dir_ / (tag + ".npy")).string() +
           " --out-json " + (dir_ / (tag + ".json")).string() + " --steps 12 --backend cpu " +
           extra;
  }
  json read_json(const std::string& tag) const {
    std::ifstream in(dir_ / (tag + ".json"));
    return json::parse(in);
  }

  fs::path dir_;
  std::vector<std::vector<int32_t>> prompts_;
};

TEST_F(LogitsCli, MatchesTheNumpyReference) {
  if (std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "numpy missing for /usr/bin/python3";
  const CliRun r = run_cli(args("whole"));
  ASSERT_EQ(r.rc, 0) << r.output;
  size_t rows = 0, cols = 0;
  const std::vector<float> logits = read_npy((dir_ / "whole.npy").string(), &rows, &cols);
  ASSERT_EQ(rows, prompts_.size());
  ASSERT_EQ(cols, 300u);
  const json out = read_json("whole");
  EXPECT_EQ(out["backend"], "cpu");
  ASSERT_EQ(out["continuations"].size(), prompts_.size());
  for (size_t p = 0; p < prompts_.size(); ++p) {
    std::string list;
    for (int32_t t : prompts_[p]) {
      if (!list.empty()) list += ',';
      list += std::to_string(t);
    }
    const std::string ref_file = (dir_ / ("ref" + std::to_string(p))).string();
    const std::string cmd = "/usr/bin/python3 " + std::string(FS_SOURCE_DIR) +
                            "/tools/llama_reference.py --model " + (dir_ / "model").string() +
                            " --prompt-ids " + list + " --dump-logits " + ref_file +
                            " --generate 12 > " + ref_file + ".ids";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(ref_file, std::ios::binary);
    std::vector<double> ref;
    for (double x; in.read(reinterpret_cast<char*>(&x), sizeof x);) ref.push_back(x);
    ASSERT_EQ(ref.size(), prompts_[p].size() * cols);
    double err = 0, norm = 0;
    for (size_t v = 0; v < cols; ++v) {
      const double want = ref[(prompts_[p].size() - 1) * cols + v];
      err += std::pow(logits[p * cols + v] - want, 2), norm += want * want;
    }
    EXPECT_LT(err / norm, kMaxNmse) << "prompt " << p;
    std::ifstream ids(ref_file + ".ids");
    std::vector<int32_t> want_ids;
    for (int32_t t; ids >> t;) want_ids.push_back(t);
    EXPECT_EQ(out["continuations"][p].get<std::vector<int32_t>>(), want_ids) << "prompt " << p;
    // top2 holds [id1, v1, id2, v2] per step with id1 the chosen token and v1 >= v2.
    ASSERT_EQ(out["top2"][p].size(), 12u);
    for (size_t s = 0; s < 12; ++s) {
      const auto& t = out["top2"][p][s];
      EXPECT_EQ(t[0].get<int>(), out["continuations"][p][s].get<int>());
      EXPECT_GE(t[1].get<double>(), t[3].get<double>());
      EXPECT_NE(t[0].get<int>(), t[2].get<int>());
    }
  }
}

TEST_F(LogitsCli, ChunkedPrefillGivesTheSameAnswers) {
  const CliRun whole = run_cli(args("whole"));
  ASSERT_EQ(whole.rc, 0) << whole.output;
  const CliRun chunked = run_cli(args("chunked", "--prefill-chunk 5"));
  ASSERT_EQ(chunked.rc, 0) << chunked.output;
  size_t r1, c1, r2, c2;
  const auto a = read_npy((dir_ / "whole.npy").string(), &r1, &c1);
  const auto b = read_npy((dir_ / "chunked.npy").string(), &r2, &c2);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(a[i]))) << i;
  EXPECT_EQ(read_json("whole")["continuations"], read_json("chunked")["continuations"]);
  EXPECT_EQ(read_json("chunked")["prefill_steps"], 5);  // the 24-token prompt: 5+5+5+5+4
}

TEST_F(LogitsCli, BadInputFailsWithAMessage) {
  std::ofstream(dir_ / "bad.json") << R"({"prompts": [[1, 2], [1, 300]]})";  // 300 = vocab
  std::string a = args("bad");
  a.replace(a.find("prompts.json"), 12, "bad.json");
  CliRun r = run_cli(a);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("outside vocab"), std::string::npos) << r.output;
  std::ofstream(dir_ / "bad.json") << R"({"prompts": []})";
  r = run_cli(a);
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("non-empty"), std::string::npos) << r.output;
  r = run_cli("--model " + (dir_ / "model").string());
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.output.find("usage"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace flashserve
