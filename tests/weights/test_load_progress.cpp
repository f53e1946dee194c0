// LoadProgress (weights/load_progress.h): silent for a load under a second; past a second it
// prints how far it is and the rate, then one "loaded" line with every layer and byte counted.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "weights/load_progress.h"

namespace flashserve {
namespace {

std::string contents(std::FILE* f) {
  std::string s;
  std::rewind(f);
  char buf[1024];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  return s;
}

TEST(LoadProgress, QuietWhenFast) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  LoadProgress p("weights of m", 4, f);
  for (int i = 0; i < 4; ++i) p.step(1000000);
  p.finish();
  EXPECT_EQ(contents(f), "");
  std::fclose(f);
}

TEST(LoadProgress, ReportsSlowLoads) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  LoadProgress p("weights of m", 4, f);
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    p.step(2000000);
  }
  p.finish();
  const std::string out = contents(f);
  // Step 3 (t ~ 1.2 s) or 2 on a slow machine is printed as progress; finish() reports step 4.
  EXPECT_NE(out.find("flashserve: loading weights of m: "), std::string::npos) << out;
  EXPECT_NE(out.find("flashserve: loaded weights of m: 4/4 layers, 8 MB in"), std::string::npos) << out;
  EXPECT_NE(out.find(" MB/s)"), std::string::npos) << out;
  EXPECT_EQ(out.find("1/4"), std::string::npos) << "printed before a second had passed: " << out;
  std::fclose(f);
}

}  // namespace
}  // namespace flashserve
