// Reads the user's lines: with libedit (line editing, in-session history) when the build found
// it, else plain line input. Ctrl-C while typing discards the line instead of quitting.
#pragma once

#include <atomic>
#include <optional>
#include <string>

namespace flashserve::chat {

// Set by the SIGINT handler (main.cpp); the reader clears it when it discards a line.
extern std::atomic<bool> g_interrupted;

// The next line without its newline; nullopt at end of input (Ctrl-D). A line interrupted by
// Ctrl-C comes back as an empty string.
std::optional<std::string> read_line(const std::string& prompt);
void add_to_history(const std::string& line);
bool line_editing_available();

// One key from stdin, shared by both readers (exposed for tests): a byte (>= 0), kKeyInterrupted
// when a Ctrl-C cancels the line being typed, or EOF. A Ctrl-C that did not interrupt a read()
// (it came while a key was being handled) is noticed when the next key arrives; that key is
// then returned by the following call, not lost.
constexpr int kKeyInterrupted = -2;
int read_key();

}  // namespace flashserve::chat
