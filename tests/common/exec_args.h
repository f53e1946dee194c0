// Replaces the calling (forked) process with args[0] run with `args`; never returns. Exit status
// 127 if the program cannot be started, as a shell reports it. For test helpers that fork a
// binary under test after setting up its file descriptors.
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

namespace flashserve::test {

[[noreturn]] inline void exec_args(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

}  // namespace flashserve::test
