// Start-up faults and secure defaults of the real binary (label server): a model file that is
// truncated, corrupted or padded, a broken tokenizer or config.json, a taken port and bad flags
// each end the process with a non-zero exit and a message naming the problem, never a crash or a
// hang. By default the server listens on 127.0.0.1 only, and an API key given through the
// environment never reaches the log. --help lists every flag, and the flags no other test uses
// (--served-model-name, --kv-memory-fraction, --max-num-batched-tokens) work on the binary.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <regex>
#include <set>

#include "tests/fault/fault_util.h"

namespace flashserve::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class FaultStartup : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("flashserve_fault_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    bin_ = read_file(model_dir() + "/stories260K.bin");
    tok_ = read_file(model_dir() + "/tok512.model");
    ASSERT_GT(bin_.size(), 1000u);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A model folder holding `bin` as stories260K.bin and `tok` as tok512.model.
  std::string folder(const std::string& name, const std::string& bin, const std::string& tok) {
    fs::path d = dir_ / name;
    fs::create_directories(d);
    write_file((d / "stories260K.bin").string(), bin);
    write_file((d / "tok512.model").string(), tok);
    return d.string();
  }

  RunResult start(std::vector<std::string> flags) {
    std::vector<std::string> args = {server_binary(), "--port", "0", "--backend", "cpu"};
    args.insert(args.end(), flags.begin(), flags.end());
    return run_program(args, 60s);
  }

  // The server must refuse to start: exit 1, no crash, no hang, the message names `what`.
  void expect_refused(const std::string& name, const std::vector<std::string>& flags,
                      const std::string& what, int code = 1, const std::string& also = "") {
    RunResult r = start(flags);
    if (!also.empty()) {
      EXPECT_NE(r.output.find(also), std::string::npos) << name << ": " << r.output;
    }
    EXPECT_FALSE(r.timed_out) << name;
    EXPECT_EQ(r.exit_code, code) << name << ": " << r.output;
    EXPECT_NE(r.output.find(what), std::string::npos) << name << ": " << r.output;
    EXPECT_EQ(r.output.find(".cpp:"), std::string::npos) << name << ": our source file: " << r.output;
    EXPECT_EQ(r.output.find("listening on"), std::string::npos) << name;
  }

  fs::path dir_;
  std::string bin_, tok_;
};

TEST_F(FaultStartup, DamagedModelFilesAreRefused) {
  const std::string h = bin_.substr(0, 28);
  auto with_header = [&](int index, int32_t value) {
    std::string b = bin_;
    std::memcpy(b.data() + 4 * index, &value, 4);
    return b;
  };
  struct Case {
    std::string name, bin, expect;
  };
  const std::vector<Case> cases = {
      {"empty", "", "truncated"},
      {"shorter than the header", bin_.substr(0, 10), "truncated"},
      {"header only", h, "truncated"},
      {"half", bin_.substr(0, bin_.size() / 2), "truncated"},
      {"one byte short", bin_.substr(0, bin_.size() - 1), "truncated"},
      {"trailing bytes", bin_ + "junk", "trailing data"},
      {"negative dim", with_header(0, -64), "dim"},
      {"huge dim", with_header(0, 1 << 30), "implausible"},
      {"zero layers", with_header(2, 0), "num_hidden_layers"},
      {"heads not dividing dim", with_header(3, 7), "n_heads"},
      {"kv heads not dividing heads", with_header(4, 3), "num_key_value_heads"},
      {"huge vocab", with_header(5, 1 << 30), "implausible"},
      {"zero seq_len", with_header(6, 0), "max_position_embeddings"},
      {"random bytes", [&] {
         std::string b = bin_;
         std::mt19937 rng(5);
         for (char& c : b) c = char(rng());
         return b;
       }(), "stories260K.bin"},
  };
  for (const Case& c : cases) {
    const std::string d = folder("m_" + std::to_string(&c - cases.data()), c.bin, tok_);
    expect_refused(c.name, {"--model", d}, c.expect, 1, "stories260K.bin");  // names the file
  }
}

TEST_F(FaultStartup, DamagedTokenizerAndConfigAreRefused) {
  expect_refused("truncated tokenizer",
                 {"--model", folder("t1", bin_, tok_.substr(0, tok_.size() / 3))}, "tok512.model");
  expect_refused("empty tokenizer", {"--model", folder("t2", bin_, "")}, "tok512.model");
  expect_refused("missing tokenizer file",
                 {"--model", folder("t3", bin_, tok_), "--tokenizer", (dir_ / "nope.model").string()},
                 "nope.model");
  // An HF folder whose config.json is not JSON.
  fs::path hf = dir_ / "hf";
  fs::create_directories(hf);
  write_file((hf / "config.json").string(), "{\"hidden_size\": 64,");
  expect_refused("bad config.json", {"--model", hf.string()}, "config.json");
  expect_refused("missing model", {"--model", (dir_ / "absent").string()}, "does not exist");
}

// Hugging Face folders with a damaged model.safetensors: each is refused at start-up with exit 1
// and a message naming the file (the loader's own cases are in tests/weights).
TEST_F(FaultStartup, DamagedSafetensorsAreRefused) {
  const std::string config = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 172,
      "num_hidden_layers": 1, "num_attention_heads": 8, "num_key_value_heads": 4,
      "vocab_size": 512, "max_position_embeddings": 512})";
  auto with_header = [](const std::string& header, const std::string& data) {
    std::string out(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    return out + header + data;
  };
  const std::string emb = R"("model.embed_tokens.weight": {"dtype": "F32", "shape": [512, 64], )";
  struct Case {
    std::string name, file, expect;
  };
  const std::vector<Case> cases = {
      {"empty file", "", "model.safetensors"},
      {"header length past the end", [] {
         std::string b(8, '\0');
         const uint64_t n = 1u << 30;
         std::memcpy(b.data(), &n, 8);
         return b + "{}";
       }(), "model.safetensors"},
      {"header not JSON", with_header("{not json", ""), "model.safetensors"},
      {"offsets past the end", with_header("{" + emb + R"("data_offsets": [0, 131072]}})", "abcd"),
       "model.safetensors"},
      {"unknown dtype", with_header(R"({"x": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}})", "ab"),
       "model.safetensors"},
      {"no tensors", with_header("{}", ""), "missing tensor"},
  };
  for (const Case& c : cases) {
    fs::path d = dir_ / ("st_" + std::to_string(&c - cases.data()));
    fs::create_directories(d);
    write_file((d / "config.json").string(), config);
    write_file((d / "model.safetensors").string(), c.file);
    write_file((d / "tokenizer.model").string(), tok_);
    expect_refused(c.name, {"--model", d.string()}, c.expect);
  }
}

TEST_F(FaultStartup, BadFlagsAndTakenPort) {
  const std::string model = folder("ok", bin_, tok_);
  expect_refused("unknown flag", {"--model", model, "--frobnicate"}, "--frobnicate", 2);
  expect_refused("bad number", {"--model", model, "--max-queue", "x"}, "--max-queue", 2);
  expect_refused("bad backend", {"--model", model, "--backend", "tpu"}, "--backend", 2);
  expect_refused("bad quantize", {"--model", model, "--quantize", "int4"}, "--quantize", 2);
  // A queue of 0 could admit nothing (Engine::create refused it: exit 1 after loading the model);
  // ports outside 0..65535 do not exist. All three are usage errors now.
  expect_refused("max-queue 0", {"--model", model, "--max-queue", "0"}, "--max-queue", 2);
  expect_refused("port too big", {"--model", model, "--port", "65536"}, "--port", 2);
  expect_refused("negative port", {"--model", model, "--port", "-1"}, "--port", 2);
  expect_refused("port overflow", {"--model", model, "--port", "99999999999999999999"}, "--port",
                 2);
  expect_refused("int overflow", {"--model", model, "--max-num-seqs", "4294967297"},
                 "--max-num-seqs", 2);
  ServerProcess first;
  ASSERT_TRUE(first.started()) << first.log();
  std::vector<std::string> args = {server_binary(), "--model", model, "--backend", "cpu",
                                   "--port", std::to_string(first.port())};
  RunResult r = run_program(args, 60s);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cannot listen"), std::string::npos) << r.output;
  EXPECT_EQ(first.stop(), 0);
}

// Every flag server/flags.cpp parses is listed by --help, and the flags no other test starts the server
// with do what they say.
TEST_F(FaultStartup, FlagsAgainstTheRealBinary) {
  RunResult help = run_program({server_binary(), "--help"}, 30s);
  ASSERT_EQ(help.exit_code, 0) << help.output;
  // The flags are the quoted "--name" literals in flags.cpp (the parser's table and its checks).
  const std::string source = read_file(std::string(FS_SOURCE_DIR) + "/server/flags.cpp");
  std::set<std::string> flags;
  const std::regex quoted("\"(--[a-z][a-z0-9-]*)\"");
  for (auto it = std::sregex_iterator(source.begin(), source.end(), quoted);
       it != std::sregex_iterator(); ++it) {
    flags.insert((*it)[1]);
  }
  EXPECT_GE(flags.size(), 20u) << "flags.cpp's flags were not found";
  for (const std::string& f : flags) {
    EXPECT_TRUE(std::regex_search(help.output, std::regex("\\n  " + f + "[ \\n]")))
        << f << " is parsed but --help does not list it:\n" << help.output;
  }

  // --served-model-name: the id in /v1/models, the "model" requests name and responses carry.
  ServerProcess named({"--served-model-name", "tiny-stories", "--no-request-log"});
  ASSERT_TRUE(named.started()) << named.log();
  json models = json::parse(http::request(named.port(), "GET", "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "tiny-stories");
  int status = 0;
  json r = complete(named.port(), {{"prompt", "Hi"}, {"max_tokens", 2}, {"model", "tiny-stories"}},
                    &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["model"], "tiny-stories");
  complete(named.port(), {{"prompt", "Hi"}, {"max_tokens", 2}, {"model", "stories260K"}}, &status);
  EXPECT_EQ(status, 404);
  const double default_blocks = metric(named.port(), "flashserve_kv_blocks_total");

  // --kv-memory-fraction scales the KV budget. On the CPU backend the cache is 8 full-length
  // sequences (512 x 8 tokens = 256 blocks of 16) unless fraction x 2 GiB is smaller, so 0.5
  // changes nothing for stories260K (1280 bytes per token) and only tiny fractions bind; there,
  // half the fraction gives half the blocks.
  EXPECT_EQ(default_blocks, 256);
  auto blocks_with = [&](const std::string& fraction) {
    ServerProcess s({"--kv-memory-fraction", fraction, "--no-request-log"});
    EXPECT_TRUE(s.started()) << fraction << ": " << s.log();
    return s.started() ? metric(s.port(), "flashserve_kv_blocks_total") : -1.0;
  };
  EXPECT_EQ(blocks_with("0.5"), default_blocks);
  const double b2 = blocks_with("0.002"), b1 = blocks_with("0.001");
  EXPECT_GT(b2, 10);
  EXPECT_LT(b2, default_blocks);
  EXPECT_NEAR(b1, b2 / 2, 1.0) << "0.002 -> " << b2 << " blocks, 0.001 -> " << b1;

  // --max-num-batched-tokens 32: a prompt over 32 tokens is prefilled in chunks and gives the
  // same greedy text as the default (512 per step: one chunk).
  const json body = {{"prompt", "Once upon a time, there was a little girl named Lily. She loved "
                                "to play outside in the park with her big red ball and her dog."},
                     {"max_tokens", 40}, {"temperature", 0}};
  json want = complete(named.port(), body, &status);
  ASSERT_EQ(status, 200) << want.dump();
  ASSERT_GT(want["usage"]["prompt_tokens"].get<int>(), 32);
  ServerProcess chunked({"--max-num-batched-tokens", "32", "--no-request-log"});
  ASSERT_TRUE(chunked.started()) << chunked.log();
  json got = complete(chunked.port(), body, &status);
  ASSERT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]);
  EXPECT_EQ(got["usage"], want["usage"]);
  EXPECT_EQ(chunked.stop(), 0);

  // --quantize fp8 (docs/FP8.md): the projections quantized at load; the start-up line says so,
  // and the server answers (the text itself may differ from the unquantized model's).
  ServerProcess fp8({"--quantize", "fp8", "--no-request-log"});
  ASSERT_TRUE(fp8.started()) << fp8.log();
  EXPECT_NE(fp8.log().find(", FP8 weights (docs/FP8.md)"), std::string::npos) << fp8.log();
  got = complete(fp8.port(), body, &status);
  ASSERT_EQ(status, 200) << got.dump();
  EXPECT_EQ(got["usage"]["prompt_tokens"], want["usage"]["prompt_tokens"]);
  EXPECT_GT(got["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(fp8.stop(), 0);
  EXPECT_EQ(named.stop(), 0);
}

TEST_F(FaultStartup, ListensOnLoopbackOnlyByDefault) {
  // No --host: spawned by hand, because ServerProcess always passes one.
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    std::string b = server_binary(), m = model_dir();
    execl(b.c_str(), b.c_str(), "--model", m.c_str(), "--port", "0", "--backend", "cpu",
          "--threads", "1", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string line;
  int port = -1;
  char c;
  while (read(out[0], &c, 1) == 1) {
    if (c != '\n') {
      line.push_back(c);
      continue;
    }
    size_t at = line.find("listening on http://");
    if (at != std::string::npos) {
      EXPECT_NE(line.find("http://127.0.0.1:"), std::string::npos) << line;
      port = std::atoi(line.c_str() + line.rfind(':') + 1);
      break;
    }
    line.clear();
  }
  close(out[0]);
  ASSERT_GT(port, 0);
  // The only listening socket on that port is 127.0.0.1 (0100007F), not 0.0.0.0 or ::.
  EXPECT_EQ(listening_addresses(port), std::vector<std::string>{"0100007F"});
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(FaultStartup, ApiKeyFromTheEnvironmentIsEnforcedAndNeverLogged) {
  const std::string key = "env-secret-8c1f";
  setenv("FLASHSERVE_API_KEY", key.c_str(), 1);
  ServerProcess server;
  unsetenv("FLASHSERVE_API_KEY");
  ASSERT_TRUE(server.started()) << server.log();
  const int port = server.port();
  const std::string body = R"({"prompt":"Hi","max_tokens":2})";
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", body).status, 401);
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", body,
                          {"Authorization: Bearer " + key + "x"}).status, 401);
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", body,
                          {"Authorization: Bearer " + key.substr(0, key.size() - 1)}).status, 401);
  EXPECT_EQ(http::request(port, "GET", "/metrics", "", {"Authorization: bearer " + key}).status, 401);
  EXPECT_EQ(http::request(port, "POST", "/v1/completions", body,
                          {"Authorization: Bearer " + key}).status, 200);
  EXPECT_EQ(http::request(port, "GET", "/health").status, 200);  // exempt
  EXPECT_EQ(server.stop(), 0);
  const std::string log = server.log();
  EXPECT_EQ(log.find(key.substr(0, 10)), std::string::npos) << log;
}

}  // namespace
}  // namespace flashserve::testing
