// The command-line conventions every flashserve program shares, over CLI11 (Debian libcli11-dev):
//   --help / -h prints the usage on stdout and exits 0;
//   an unknown flag, a missing or malformed value, or a value out of its range is a usage error:
//   "<program>: <what is wrong>" and a hint on stderr, exit 2;
//   a failure after parsing (a model that does not load, a port in use) exits 1.
// docs/CONVENTIONS.md#command-lines lists them. Ranges are checked here, once, by the option's
// validator (CLI::Range, CLI::IsMember), never again by hand.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <string>

namespace flashserve::cli {

constexpr int kUsageError = 2;

// Parses argv into `app`'s options. Returns -1 when the program should go on, else the exit
// status to return from main (0 after --help, kUsageError after a usage error).
inline int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\nrun '%s --help' for the usage\n", app.get_name().c_str(),
                 e.what(), app.get_name().c_str());
    return kUsageError;
  }
}

// main's body after parsing: returns body(), or prints "<program>: error: <what>" and returns 1
// when it throws (a failure after the flags were accepted).
inline int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

// --quantize none|fp8, alike in every program that loads a model (weights/model.h's
// parse_quantize reads the value; docs/FP8.md).
inline CLI::Option* add_quantize_flag(CLI::App& app, std::string& value) {
  return app
      .add_option("--quantize", value,
                  "fp8: the layers' projections become FP8 E4M3 weights at load, one\n"
                  "scale per output row (docs/FP8.md); none: as stored (default)")
      ->type_name("none|fp8")
      ->check(CLI::IsMember({"none", "fp8"}).description(""));
}

// The command as typed (argv joined by spaces), for the records benchmarks print.
inline std::string command_line(int argc, char** argv) {
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i) command += ' ';
    command += argv[i];
  }
  return command;
}

// A usage error found after parsing (e.g. two flags that contradict each other): the same
// message shape and exit status as a parse error.
inline int usage_error(const CLI::App& app, const std::string& what) {
  std::fprintf(stderr, "%s: %s\nrun '%s --help' for the usage\n", app.get_name().c_str(),
               what.c_str(), app.get_name().c_str());
  return kUsageError;
}

}  // namespace flashserve::cli
