// The flashserve-generate binary: greedy stories260K prints the reference continuation and a
// tokens/s line; bad flags and bad files exit non-zero with a message (no crash, no signal).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

const std::string kBin = std::string(FS_BINARY_DIR) + "/engine/flashserve-generate";
const std::string kModel = std::string(FS_MODELS_DIR) + "/stories260K";

// Runs `args`, returns the exit status (-1 for a signal) and stdout+stderr in *out.
int run(const std::string& args, std::string* out) {
  FILE* p = popen((kBin + " " + args + " 2>&1").c_str(), "r");
  if (!p) return -2;
  char buf[4096];
  out->clear();
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(GenerateCli, GreedyStoriesAndErrors) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not found: " << kModel;
  std::string out;
  ASSERT_EQ(run("--model " + kModel + " --temperature 0 --max-tokens 20", &out), 0) << out;
  EXPECT_NE(out.find("Once upon a time, there was a little girl named Lily."), std::string::npos)
      << out;
  EXPECT_NE(out.find("tokens/s"), std::string::npos) << out;
  for (const std::string& bad : std::vector<std::string>{
           "--max-tokens x", "--top-p 2", "--nope 1", "--model", "--model /nonexistent/model",
           "--model " + kModel + " --tokenizer " + kModel + "/stories260K.bin"}) {
    const int rc = run(bad, &out);
    EXPECT_GT(rc, 0) << bad << ": " << out;
    EXPECT_NE(out.find("flashserve-generate:"), std::string::npos) << bad << ": " << out;
  }
}

}  // namespace
