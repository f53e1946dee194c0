// The project's one exception type and the FS_CHECK macro.
// C++17-clean: .cu files include it. Library code throws flashserve::Error and never calls exit().
#pragma once

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>

namespace flashserve {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <class T, class... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
}  // namespace detail

// Joins its arguments with operator<< into one string: str_cat("file ", path, ": ", n).
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  detail::append_all(os, args...);
  return os.str();
}

// Whether error messages carry the throwing source file and line: only when the environment has
// FLASHSERVE_LOG_LEVEL=debug. A user reads "config.json: missing hidden_size", not our file name.
inline bool error_locations_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("FLASHSERVE_LOG_LEVEL");
    return v != nullptr && std::strcmp(v, "debug") == 0;
  }();
  return on;
}

template <class... Args>
[[noreturn]] void throw_error(const char* file, int line, const Args&... args) {
  if (error_locations_enabled()) throw Error(str_cat(file, ":", line, ": ", args...));
  throw Error(str_cat(args...));
}

}  // namespace flashserve

// FS_CHECK(cond, message parts...): an invariant; throws flashserve::Error (file:line at debug level).
#define FS_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) ::flashserve::throw_error(__FILE__, __LINE__, "check failed: " #cond " — ", \
                                           ##__VA_ARGS__);                                \
  } while (0)

// FS_THROW(message parts...): throws flashserve::Error; the message names the user's file and the
// problem; our file:line is added at debug level (FLASHSERVE_LOG_LEVEL=debug).
#define FS_THROW(...) ::flashserve::throw_error(__FILE__, __LINE__, ##__VA_ARGS__)
