// Helpers for the weights tests: small model shapes, the error a call throws, a fresh temporary folder per test
// (tests/common/temp_dir.h), whole-file reads, and a check that a pointer lies in a memory
// mapping of a given file (/proc/self/maps), which proves the loader mapped the file instead of
// reading it into a copy.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tests/common/temp_dir.h"
#include "weights/loaded_model.h"

namespace flashserve::test {

namespace fs = std::filesystem;

// The message of the flashserve::Error that `f` throws, or `if_none` when it throws none.
inline std::string error_of(const std::function<void()>& f, const std::string& if_none) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return if_none;
}

// A small Llama shape (the other ModelConfig fields keep their defaults).
struct SmallShape {
  int hidden, intermediate, layers, q_heads, kv_heads, head_dim, vocab, max_positions;
  bool tied;
};
inline ModelConfig small_config(const SmallShape& s) {
  ModelConfig c;
  c.hidden_size = s.hidden, c.intermediate_size = s.intermediate, c.num_layers = s.layers;
  c.num_q_heads = s.q_heads, c.num_kv_heads = s.kv_heads, c.head_dim = s.head_dim;
  c.vocab_size = s.vocab, c.max_model_len = s.max_positions;
  c.tie_word_embeddings = s.tied;
  return c;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(n));
}

inline void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, text.data(), text.size());
}

// True when `p` lies in a mapping of the file `path` in this process.
inline bool is_mapped_from(const void* p, const std::string& path) {
  const std::string want = fs::canonical(path).string();
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    std::istringstream ls(line);
    std::string range, perms, offset, dev, inode, file;
    ls >> range >> perms >> offset >> dev >> inode >> file;
    const size_t dash = range.find('-');
    const uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= lo && addr < hi) return file == want;
  }
  return false;
}

}  // namespace flashserve::test
