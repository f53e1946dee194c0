// Single-threaded encode throughput of flashserve's tokenizers (tokenizer.json or .model), the
// counterpart of bench/tokenizer_hf_baseline.py (HF `tokenizers`) on the same text.
//   flashserve-bench-tokenizer --make-text CORPUS.json OUT.txt [MB]
//       writes a text of about MB (default 4) megabytes assembled from the test corpus: its lines
//       and lines of 5-20 words drawn (seeded) from all the corpus's words, so the text has
//       many distinct words and the per-piece cache is not all hits.
//   flashserve-bench-tokenizer TEXT NAME=PATH [NAME=PATH...]
//       encodes TEXT with each tokenizer (add_bos=false), in two modes: "whole" (one call on
//       the whole file) and "lines" (one call per line, newline kept); best of 3; one JSON line
//       per (tokenizer, mode) with MB/s (1e6 bytes of the file per second) and the token count.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

using namespace flashserve;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int make_text(const std::string& corpus_path, const std::string& out_path, double mb) {
  const auto corpus = nlohmann::json::parse(read_file(corpus_path)).get<std::vector<std::string>>();
  std::vector<std::string> words;
  for (const auto& line : corpus) {
    std::istringstream ss(line);
    for (std::string w; ss >> w;) words.push_back(w);
  }
  std::mt19937 rng(20261125);
  std::string text;
  const size_t target = size_t(mb * 1e6);
  for (size_t n = 0; text.size() < target; ++n) {
    if (n % 4 == 0) {
      const std::string& line = corpus[rng() % corpus.size()];
      for (char c : line) text += c == '\n' ? ' ' : c;  // one line of the file per entry
    } else {
      const int count = 5 + int(rng() % 16);
      for (int i = 0; i < count; ++i) text += (i ? " " : "") + words[rng() % words.size()];
    }
    text += '\n';
  }
  std::ofstream(out_path, std::ios::binary) << text;
  std::printf("wrote %zu bytes to %s\n", text.size(), out_path.c_str());
  return 0;
}

template <class Fn>
double best_seconds(int runs, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 3 && args[0] == "--make-text")
    return make_text(args[1], args[2], args.size() > 3 ? std::stod(args[3]) : 4.0);
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: see the comment at the top of bench/tokenizer_bench.cpp\n");
    return 2;
  }
  const std::string text = read_file(args[0]);
  std::vector<std::string> lines;
  for (size_t b = 0; b < text.size();) {
    size_t e = text.find('\n', b);
    e = e == std::string::npos ? text.size() : e + 1;
    lines.push_back(text.substr(b, e - b));
    b = e;
  }
  for (size_t i = 1; i < args.size(); ++i) {
    const size_t eq = args[i].find('=');
    const std::string name = args[i].substr(0, eq), path = args[i].substr(eq + 1);
    const auto tok = Tokenizer::load(path);
    for (const char* mode : {"whole", "lines"}) {
      size_t tokens = 0;
      const double secs = best_seconds(3, [&] {
        tokens = 0;
        if (std::string(mode) == "whole") {
          tokens = tok->encode(text, false).size();
        } else {
          for (const auto& l : lines) tokens += tok->encode(l, false).size();
        }
      });
      nlohmann::json j = {{"tokenizer", name}, {"impl", "flashserve"}, {"mode", mode},
                          {"bytes", text.size()}, {"tokens", tokens}, {"seconds", secs},
                          {"mb_per_s", double(text.size()) / secs / 1e6}};
      std::cout << j.dump() << std::endl;
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
