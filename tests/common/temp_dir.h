// fresh_dir(name): an empty temporary folder for the running GoogleTest test, named after the
// process, the test and `name`, and removed when the test program exits.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace flashserve::test {

// Folders made by fresh_dir, removed when the test program exits.
struct TempDirs {
  std::vector<std::filesystem::path> paths;
  ~TempDirs() {
    std::error_code ec;
    for (const auto& p : paths) std::filesystem::remove_all(p, ec);
  }
};
inline TempDirs temp_dirs;

inline std::string fresh_dir(const std::string& name) {
  namespace fs = std::filesystem;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path p = fs::temp_directory_path() /
                     ("fs_test_" + std::to_string(::getpid()) + "_" + info->name() + "_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  temp_dirs.paths.push_back(p);
  return p.string();
}

}  // namespace flashserve::test
