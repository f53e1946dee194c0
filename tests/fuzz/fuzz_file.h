// Helpers shared by the fuzz targets: a scratch file per process (the loaders read paths, so the
// input is written to tmpfs first) and a check that aborts with a message (libFuzzer then saves
// the input as a crash).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace flashserve::fuzz {

// /dev/shm (or /tmp)/flashserve_fuzz_<pid>_<tag><suffix>, rewritten with `data` each call.
inline const std::string& write_scratch(const std::string& tag, const std::string& suffix,
                                        const uint8_t* data, size_t size) {
  static std::string path;
  if (path.empty()) {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path = std::string(dir) + "/flashserve_fuzz_" + std::to_string(getpid()) + "_" + tag + suffix;
    std::atexit([] { std::remove(path.c_str()); });
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  return path;
}

// An invariant of the code under test: a violation is a finding, not an expected error.
#define FUZZ_ASSERT(cond, msg)                                                        \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "fuzz invariant failed: %s: %s (%s:%d)\n", #cond, msg,     \
                   __FILE__, __LINE__);                                               \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)

}  // namespace flashserve::fuzz
