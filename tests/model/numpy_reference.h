// The float64 numpy forward (tools/llama_reference.py, run through /usr/bin/python3) from the
// model tests: its command line, and a prompt's logits at every position.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace flashserve::test {

inline bool have_numpy() {
  return std::system("/usr/bin/python3 -c 'import numpy' > /dev/null 2>&1") == 0;
}

// The numpy reference's command line for `model` and prompt `ids`, before its output options.
inline std::string reference_command(const std::string& model, const std::vector<int32_t>& ids) {
  std::string list;
  for (int32_t t : ids) {
    if (!list.empty()) list += ',';
    list += std::to_string(t);
  }
  return "/usr/bin/python3 " + std::string(FS_SOURCE_DIR) + "/tools/llama_reference.py --model '" +
         model + "' --prompt-ids " + list;
}

// Logits [num_tokens, vocab] from the numpy reference, or empty on failure.
inline std::vector<float> numpy_logits(const std::string& model, const std::vector<int32_t>& ids,
                                       const std::string& out_file) {
  const std::string cmd = reference_command(model, ids) + " --dump-logits '" + out_file + "'";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "reference failed: " << cmd;
    return {};
  }
  std::ifstream in(out_file, std::ios::binary);
  std::vector<double> d;
  for (double x; in.read(reinterpret_cast<char*>(&x), sizeof x);) d.push_back(x);
  return std::vector<float>(d.begin(), d.end());
}

// numpy's greedy continuation of `prompt` by n tokens (written to `out_file` on the way), or
// empty on failure.
inline std::vector<int32_t> numpy_greedy(const std::string& model, const std::vector<int32_t>& prompt,
                                         int n, const std::string& out_file) {
  const std::string cmd = reference_command(model, prompt) + " --generate " + std::to_string(n) +
                          " > '" + out_file + "'";
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "reference failed: " << cmd;
    return {};
  }
  std::vector<int32_t> ids;
  std::ifstream in(out_file);
  for (int32_t t; in >> t;) ids.push_back(t);
  return ids;
}

}  // namespace flashserve::test
