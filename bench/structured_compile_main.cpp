// bench_structured_compile: what a structured-output request costs before its first token —
// compiling its JSON Schema and the first token mask — for every schema of a folder over one
// tokenizer's vocabulary (host only). JSON lines on stdout: one per schema (medians over
// --repeats, each with a fresh compiler so nothing comes from a cache), then a summary with the
// p50/p99 over the schemas. --synthetic-vocab N stretches the vocabulary to N tokens by joining
// pieces, to stand in for a larger tokenizer (e.g. 128k) that is not at hand.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/cli.h"
#include "structured/compiled_grammar.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

using namespace flashserve;
using namespace flashserve::structured;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

double ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The q-quantile of v (nearest rank).
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The vocabulary grown to `n` tokens with pieces made of two existing ones (fixed seed).
void stretch(TokenVocabulary& v, int n) {
  std::mt19937 rng(7);
  const int base = v.vocab_size();
  while (v.vocab_size() < n) {
    const std::string& a = v.token_bytes[rng() % base];
    const std::string& b = v.token_bytes[rng() % base];
    v.token_bytes.push_back(a.size() + b.size() < 24 ? a + b : a);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer = "../shared/models/llama2-tokenizer/tokenizer.model";
  std::string schemas = "tests/structured/schemas";
  int repeats = 5, synthetic = 0;
  CLI::App app{"Schema compile + first token mask over a folder of JSON Schemas; JSON lines.",
               "bench_structured_compile"};
  app.add_option("--tokenizer", tokenizer, "tokenizer file (SentencePiece .model or tokenizer.json)")
      ->capture_default_str();
  app.add_option("--schemas", schemas, "folder of *.json schemas")->capture_default_str();
  app.add_option("--repeats", repeats)->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--synthetic-vocab", synthetic, "stretch the vocabulary to this many tokens (0: off)")
      ->check(CLI::Range(0, 1 << 20))->capture_default_str();
  if (const int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const std::string command = cli::command_line(argc, argv);
  return cli::run_main("bench_structured_compile", [&] {
    auto tok = Tokenizer::load(tokenizer);
    TokenVocabulary vocab = vocabulary_from_tokenizer(*tok, tok->vocab_size());
    if (synthetic > 0) stretch(vocab, synthetic);
    const auto t0 = Clock::now();
    auto trie = std::make_shared<const VocabTrie>(std::move(vocab));
    const double trie_ms = ms(t0, Clock::now());

    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(schemas))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<double> compile_all, mask_all, total_all;
    int refused = 0;
    for (const auto& f : files) {
      const std::string text = read_file(f);
      json j{{"bench", "structured_compile"}, {"schema", f.filename().string()},
             {"vocab_size", trie->vocab_size()}};
      std::vector<double> compile, mask, total;
      try {
        for (int r = 0; r < repeats; ++r) {
          GrammarCompiler compiler(trie);  // fresh: no cached grammar or mask
          const auto a = Clock::now();
          auto grammar = compiler.json_schema(text);
          const auto b = Clock::now();
          Matcher m(grammar);
          std::vector<uint32_t> words(m.mask_words());
          m.fill_next_token_mask(words.data());
          const auto c = Clock::now();
          compile.push_back(ms(a, b)), mask.push_back(ms(b, c)), total.push_back(ms(a, c));
        }
      } catch (const std::exception& e) {  // a refused schema: reported, not timed
        ++refused;
        j["error"] = e.what();
        std::printf("%s\n", j.dump().c_str());
        continue;
      }
      j["compile_ms"] = quantile(compile, 0.5);
      j["first_mask_ms"] = quantile(mask, 0.5);
      j["total_ms"] = quantile(total, 0.5);
      compile_all.push_back(j["compile_ms"]), mask_all.push_back(j["first_mask_ms"]);
      total_all.push_back(j["total_ms"]);
      std::printf("%s\n", j.dump().c_str());
    }
    const json summary{{"bench", "structured_compile_summary"},
                       {"command", command},
                       {"tokenizer", tokenizer},
                       {"vocab_size", trie->vocab_size()},
                       {"schemas", schemas},
                       {"num_schemas", files.size()},
                       {"num_refused", refused},
                       {"repeats", repeats},
                       {"trie_build_ms", trie_ms},
                       {"compile_ms_p50", quantile(compile_all, 0.5)},
                       {"first_mask_ms_p50", quantile(mask_all, 0.5)},
                       {"total_ms_p50", quantile(total_all, 0.5)},
                       {"total_ms_p99", quantile(total_all, 0.99)}};
    std::printf("%s\n", summary.dump().c_str());
    return 0;
  });
}
