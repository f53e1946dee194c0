// What the command-line programs in tools/ and bench/ share: walking "--flag value" pairs with
// the same answers to -h/--help (usage on stdout, exit 0) and to a missing value or an unknown
// flag (message and usage on stderr, exit 2), and main's "<program>: error: <what>" (exit 1).
// (The server's flags are richer and use their own parser, server/main.cpp.)
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>

namespace flashserve::cli {

// Prints "<program>: <msg>" and the usage to stderr and exits 2.
[[noreturn]] inline void usage_error(const char* program, const std::string& msg,
                                     const char* usage) {
  std::fprintf(stderr, "%s: %s\n%s", program, msg.c_str(), usage);
  std::exit(2);
}

// Calls set(flag, value) for every flag of argv in order; flags named in `switches` take no value
// (set gets ""). set() returns false for a flag it does not know.
inline void parse_flags(int argc, char** argv, const char* program, const char* usage,
                        std::initializer_list<std::string_view> switches,
                        const std::function<bool(const std::string&, const std::string&)>& set) {
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-h" || f == "--help") {
      std::fputs(usage, stdout);
      std::exit(0);
    }
    bool is_switch = false;
    for (std::string_view s : switches) is_switch = is_switch || f == s;
    std::string v;
    if (!is_switch) {
      if (i + 1 >= argc) usage_error(program, "missing value for " + f, usage);
      v = argv[++i];
    }
    if (!set(f, v)) usage_error(program, "unknown flag " + f, usage);
  }
}

// main's body: returns body(), or prints "<program>: error: <what>" and returns 1 when it throws.
inline int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace flashserve::cli
