// The flashserve-generate binary: greedy stories260K prints the reference continuation and a
// tokens/s line; --prompt's text starts the output and conditions what follows; --seed makes a
// sampled run repeatable; bad flags and bad files exit non-zero with a message (no crash).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace {

const std::string kBin = std::string(FS_BINARY_DIR) + "/tools/flashserve-generate";
const std::string kModel = std::string(FS_MODELS_DIR) + "/stories260K";

// Runs `args`, returns the exit status (-1 for a signal) and stdout+stderr in *out (stdout only
// without `with_stderr`: the generated text, without the timing line).
int run(const std::string& args, std::string* out, bool with_stderr = true) {
  FILE* p = popen((kBin + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
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
  // --quantize fp8 (docs/FP8.md): the FP8 model's greedy text starts like the fp32 one (the two
  // agree for the first 23 tokens, test_fp8_model); a value it does not know is a usage error.
  ASSERT_EQ(run("--model " + kModel + " --temperature 0 --max-tokens 12 --quantize fp8", &out), 0)
      << out;
  EXPECT_NE(out.find("Once upon a time, there was a little girl named Lily."), std::string::npos)
      << out;
  // Usage errors exit 2 (docs/CONVENTIONS.md#command-lines); files that do not load exit 1.
  for (const std::string& bad : std::vector<std::string>{"--max-tokens x", "--top-p 2", "--top-p 0",
                                                         "--nope 1", "--model", "--backend gpu",
                                                         "--quantize int8"}) {
    EXPECT_EQ(run(bad, &out), 2) << bad << ": " << out;
    EXPECT_NE(out.find("flashserve-generate:"), std::string::npos) << bad << ": " << out;
  }
  for (const std::string& bad : std::vector<std::string>{
           "--model /nonexistent/model", "--model " + kModel + " --tokenizer " + kModel + "/stories260K.bin"}) {
    EXPECT_EQ(run(bad, &out), 1) << bad << ": " << out;
    EXPECT_NE(out.find("flashserve-generate: error:"), std::string::npos) << bad << ": " << out;
    EXPECT_EQ(out.find(".cpp:"), std::string::npos) << bad << ": our source file: " << out;
  }
  EXPECT_EQ(run("--help", &out), 0) << out;
  EXPECT_NE(out.find("--max-tokens"), std::string::npos) << out;
}

// Without --model, the default model is found beside the program, whatever the working directory.
TEST(GenerateCli, DefaultModelFromAnyDirectory) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not found: " << kModel;
  std::string out;
  if (run("--temperature 0 --max-tokens 8 --prompt Once", &out) == 1 &&
      out.find("no default model found") != std::string::npos)
    GTEST_SKIP() << "no stories260K beside this checkout (scripts/fetch_model.sh): " << out;
  EXPECT_EQ(run("--temperature 0 --max-tokens 8 --prompt Once", &out, false), 0) << out;
  const std::string from_root = out;
  FILE* p = popen(("cd / && " + kBin + " --temperature 0 --max-tokens 8 --prompt Once 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[4096];
  std::string elsewhere;
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) elsewhere.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << elsewhere;
  EXPECT_EQ(elsewhere.rfind(from_root, 0), 0u) << elsewhere;  // the same text, then the timing line
}

// stdout is the prompt text, then the generated text (one newline at the end). Sampling with the
// same --seed repeats the text exactly; another seed gives another text.
TEST(GenerateCli, PromptAndSeed) {
  if (!std::filesystem::exists(kModel)) GTEST_SKIP() << "model not found: " << kModel;
  const std::string prompt = "The little dog";
  auto sampled = [&](int seed) {
    std::string out;
    EXPECT_EQ(run("--model " + kModel + " --threads 1 --max-tokens 40 --temperature 1 --seed " +
                      std::to_string(seed) + " --prompt '" + prompt + "'",
                  &out, /*with_stderr=*/false),
              0);
    return out;
  };
  const std::string a = sampled(7);
  EXPECT_EQ(a.rfind(prompt, 0), 0u) << a;             // the prompt starts the output
  EXPECT_GT(a.size(), prompt.size() + 10) << a;       // and generated text follows it
  EXPECT_EQ(a.back(), '\n') << a;
  EXPECT_EQ(sampled(7), a);                           // same seed, same text
  const std::string b = sampled(8);
  EXPECT_EQ(b.rfind(prompt, 0), 0u) << b;
  EXPECT_NE(b, a);                                    // another seed, another text

  // The generation continues the prompt's tokens (BOS + prompt): greedy from a prefix of the
  // reference story goes on with the rest of that story.
  std::string out;
  ASSERT_EQ(run("--model " + kModel + " --threads 1 --temperature 0 --max-tokens 4 --prompt "
                "'Once upon a time, there was a little girl'", &out, /*with_stderr=*/false), 0);
  EXPECT_EQ(out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << out;
}

}  // namespace
